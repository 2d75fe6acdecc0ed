#include "runtime/compile/tool_protocol.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

namespace jitcache::tool_protocol {
namespace {

using nlohmann::json;

json bytes(const std::string& text) { return json::binary(Bytes(text.begin(), text.end())); }
json bytes(const Bytes& data) { return json::binary(data); }

// Reads a field written by bytes(); anything else throws json's type_error.
std::string text_of(const json& value) {
  const auto& b = value.get_binary();
  return std::string(b.begin(), b.end());
}

json text_list(const std::vector<std::string>& items) {
  json list = json::array();
  for (const auto& item : items) list.push_back(bytes(item));
  return list;
}

std::vector<std::string> texts_of(const json& list) {
  std::vector<std::string> items;
  for (const auto& item : list) items.push_back(text_of(item));
  return items;
}

Bytes to_frame(const json& doc) { return json::to_cbor(doc); }

// CBOR that does not parse, or a field of the wrong type: the stream is garbled.
template <class Fn>
auto decoded(const Bytes& frame, const char* what, Fn&& fn) -> decltype(fn(json{})) {
  try {
    // Read through char pointers: nlohmann/json 3.11.2 (Debian 12) reads a range of
    // unsigned char with std::char_traits<unsigned char>, which libc++ (the wheel's C++
    // runtime, scripts/wheel.sh) does not define.
    const char* bytes = reinterpret_cast<const char*>(frame.data());
    return fn(json::from_cbor(bytes, bytes + frame.size()));
  } catch (const std::exception& e) {
    return make_error(ErrorCode::compile, std::string("garbled ") + what + " from the tool worker: " + e.what());
  }
}

}  // namespace

int send_frame(int fd, const Bytes& payload) {
  Bytes frame;
  append_frame(frame, payload);
  std::size_t sent = 0;
  while (sent < frame.size()) {
    const ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    sent += static_cast<std::size_t>(n);
  }
  return 0;
}

void append_frame(Bytes& out, const Bytes& payload) {
  const auto size = static_cast<std::uint32_t>(payload.size());
  for (int shift = 0; shift < 32; shift += 8) out.push_back(static_cast<std::uint8_t>(size >> shift));
  out.insert(out.end(), payload.begin(), payload.end());
}

Result<std::optional<Bytes>> take_frame(Bytes& buffer) {
  if (buffer.size() < 4) return std::nullopt;
  std::uint32_t size = 0;
  for (int i = 3; i >= 0; --i) size = (size << 8) | buffer[static_cast<std::size_t>(i)];
  if (size > k_max_frame_bytes)
    return make_error(ErrorCode::compile, "garbled stream from the tool worker: a frame of " + std::to_string(size) +
                                              " bytes (the limit is " + std::to_string(k_max_frame_bytes) + ")");
  if (buffer.size() < 4 + std::size_t{size}) return std::nullopt;
  Bytes frame(buffer.begin() + 4, buffer.begin() + 4 + size);
  buffer.erase(buffer.begin(), buffer.begin() + 4 + size);
  return frame;
}

Bytes encode_request(const SourceInput& input) {
  json headers = json::array();
  for (const auto& [name, text] : input.headers) headers.push_back(json::array({bytes(name), bytes(text)}));
  return to_frame({{"kind", static_cast<int>(input.kind)},
                   {"text", bytes(input.text)},
                   {"headers", headers},
                   {"entry", bytes(input.entry)},
                   {"target", bytes(input.target)},
                   {"options", text_list(input.options)},
                   {"name", bytes(input.name)}});
}

Result<SourceInput> decode_request(const Bytes& frame) {
  return decoded(frame, "request", [](const json& doc) -> Result<SourceInput> {
    SourceInput in;
    const int kind = doc.at("kind").get<int>();
    if (kind < 0 || kind > static_cast<int>(SourceKind::ptx))
      return make_error(ErrorCode::invalid_argument, "unknown source kind " + std::to_string(kind));
    in.kind = static_cast<SourceKind>(kind);
    in.text = text_of(doc.at("text"));
    for (const auto& h : doc.at("headers")) in.headers.emplace_back(text_of(h.at(0)), text_of(h.at(1)));
    in.entry = text_of(doc.at("entry"));
    in.target = text_of(doc.at("target"));
    in.options = texts_of(doc.at("options"));
    in.name = text_of(doc.at("name"));
    return in;
  });
}

Bytes encode_stage(const std::string& tool, const std::string& stage) {
  return to_frame({{"tool", bytes(tool)}, {"stage", bytes(stage)}});
}

Bytes encode_result(const Result<SourceOutput>& result) {
  if (!result)
    return to_frame({{"error",
                      {{"code", static_cast<int>(result.error().code)},
                       {"message", bytes(result.error().message)},
                       {"detail", bytes(result.error().detail)}}}});
  const SourceOutput& out = *result;
  json tools = json::object();
  for (const auto& [tool, version] : out.tools) tools[tool] = bytes(version);
  json tool_files = json::object();
  for (const auto& [tool, file] : out.tool_files) tool_files[tool] = bytes(file);
  json tool_builds = json::object();
  for (const auto& [tool, build] : out.tool_builds) tool_builds[tool] = bytes(build);
  return to_frame({{"output",
                    {{"cubin", bytes(out.cubin)},
                     {"ptx", bytes(out.ptx)},
                     {"usage",
                      {out.usage.registers, out.usage.stack_frame_bytes, out.usage.spill_store_bytes,
                       out.usage.spill_load_bytes}},
                     {"log", bytes(out.log)},
                     {"compile_ms", out.compile_ms},
                     {"tools", tools},
                     {"tool_files", tool_files},
                     {"tool_builds", tool_builds},
                     {"effective_options", text_list(out.effective_options)}}}});
}

Result<Reply> decode_reply(const Bytes& frame) {
  return decoded(frame, "reply", [](const json& doc) -> Result<Reply> {
    Reply reply;
    if (doc.contains("stage")) {
      reply.is_stage = true;
      reply.tool = text_of(doc.at("tool"));
      reply.stage = text_of(doc.at("stage"));
      return reply;
    }
    if (doc.contains("error")) {
      const json& e = doc.at("error");
      const int code = e.at("code").get<int>();
      if (code < 0 || code > static_cast<int>(ErrorCode::internal))
        return make_error(ErrorCode::compile, "garbled reply from the tool worker: error code " + std::to_string(code));
      reply.result = make_error(static_cast<ErrorCode>(code), text_of(e.at("message")), text_of(e.at("detail")));
      return reply;
    }
    const json& o = doc.at("output");
    SourceOutput out;
    const auto& cubin = o.at("cubin").get_binary();
    out.cubin.assign(cubin.begin(), cubin.end());
    out.ptx = text_of(o.at("ptx"));
    const json& usage = o.at("usage");
    out.usage.registers = usage.at(0).get<int>();
    out.usage.stack_frame_bytes = usage.at(1).get<int>();
    out.usage.spill_store_bytes = usage.at(2).get<int>();
    out.usage.spill_load_bytes = usage.at(3).get<int>();
    out.log = text_of(o.at("log"));
    out.compile_ms = o.at("compile_ms").get<double>();
    for (const auto& [tool, version] : o.at("tools").items()) out.tools[tool] = text_of(version);
    for (const auto& [tool, file] : o.at("tool_files").items()) out.tool_files[tool] = text_of(file);
    // Optional: a worker of an older jitcache does not send it (then the files must agree).
    if (const auto builds = o.find("tool_builds"); builds != o.end())
      for (const auto& [tool, build] : builds->items()) out.tool_builds[tool] = text_of(build);
    out.effective_options = texts_of(o.at("effective_options"));
    reply.result = std::move(out);
    return reply;
  });
}

}  // namespace jitcache::tool_protocol
