#include "runtime/compile/artifact_bundle.hpp"

#include <xxhash.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace jitcache {
namespace {

constexpr char k_magic[8] = {'J', 'C', 'K', 'B', 'N', 'D', 'L', '1'};

enum Tag : std::uint32_t {
  k_tag_facts = 1,
  k_tag_entry = 2,
  k_tag_cubin = 3,
  k_tag_ptx = 4,
  k_tag_log = 5,
  k_tag_options = 6,
  k_tag_usage = 7,
  k_tag_compile_ms = 8,
  k_tag_last = 8,
};

template <class T>
void put(std::vector<std::byte>& out, T value) {
  static_assert(std::is_trivially_copyable_v<T>);
  // Little-endian hosts only (x86-64, aarch64): the struct bytes are the wire bytes.
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), p, p + sizeof(T));
}

void put_section(std::vector<std::byte>& out, std::uint32_t tag, std::span<const std::byte> bytes) {
  put<std::uint32_t>(out, tag);
  put<std::uint64_t>(out, bytes.size());
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void put_section(std::vector<std::byte>& out, std::uint32_t tag, std::string_view text) {
  put_section(out, tag, std::as_bytes(std::span(text.data(), text.size())));
}

Error bad(const std::string& what) {
  return Error{ErrorCode::invalid_input, "kernel bundle: " + what, {}};
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : m_bytes(bytes) {}
  template <class T>
  Result<T> get(const char* field) {
    if (m_bytes.size() - m_at < sizeof(T)) return std::unexpected(bad(std::string("truncated at ") + field));
    T value;
    std::memcpy(&value, m_bytes.data() + m_at, sizeof(T));
    m_at += sizeof(T);
    return value;
  }
  Result<std::span<const std::byte>> take(std::uint64_t n, const char* field) {
    if (m_bytes.size() - m_at < n) return std::unexpected(bad(std::string("truncated in ") + field));
    auto s = m_bytes.subspan(m_at, n);
    m_at += n;
    return s;
  }
  std::size_t at() const { return m_at; }

 private:
  std::span<const std::byte> m_bytes;
  std::size_t m_at = 0;
};

std::string as_text(std::span<const std::byte> s) {
  return std::string(reinterpret_cast<const char*>(s.data()), s.size());
}

const char* tag_name(std::uint32_t tag) {
  switch (tag) {
    case k_tag_facts: return "facts";
    case k_tag_entry: return "entry";
    case k_tag_cubin: return "cubin";
    case k_tag_ptx: return "ptx";
    case k_tag_log: return "log";
    case k_tag_options: return "options";
    case k_tag_usage: return "usage";
    case k_tag_compile_ms: return "compile_ms";
  }
  return "?";
}

}  // namespace

std::vector<std::byte> serialize_bundle(const CompiledArtifact& a) {
  std::vector<std::byte> out;
  out.reserve(a.cubin.size() + a.ptx.size() + a.log.size() + 1024);
  const auto* magic = reinterpret_cast<const std::byte*>(k_magic);
  out.insert(out.end(), magic, magic + sizeof k_magic);
  put<std::uint32_t>(out, k_bundle_format_version);
  put<std::uint32_t>(out, 8);
  nlohmann::json facts(a.facts);  // std::map: keys sorted, so the bytes are canonical
  put_section(out, k_tag_facts, facts.dump());
  put_section(out, k_tag_entry, a.entry);
  put_section(out, k_tag_cubin, std::as_bytes(std::span(a.cubin)));
  put_section(out, k_tag_ptx, a.ptx);
  put_section(out, k_tag_log, a.log);
  std::string options;
  for (const auto& o : a.options) options += o + "\n";
  put_section(out, k_tag_options, options);
  const std::int32_t usage[4] = {a.usage.registers, a.usage.stack_frame_bytes,
                                 a.usage.spill_store_bytes, a.usage.spill_load_bytes};
  put_section(out, k_tag_usage, std::as_bytes(std::span(usage)));
  put_section(out, k_tag_compile_ms, std::as_bytes(std::span(&a.compile_ms, 1)));
  put<std::uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

namespace {

Result<CompiledArtifact> parse_sections(std::span<const std::byte> bytes, BundleText text) {
  const bool keep_text = text == BundleText::load;
  if (bytes.size() < sizeof k_magic + 8 + 8 || std::memcmp(bytes.data(), k_magic, sizeof k_magic) != 0)
    return std::unexpected(bad("bad magic (not a jitcache kernel bundle)"));
  const std::size_t body = bytes.size() - 8;
  std::uint64_t stored;
  std::memcpy(&stored, bytes.data() + body, 8);
  if (XXH3_64bits(bytes.data(), body) != stored) return std::unexpected(bad("checksum mismatch"));

  Reader r(bytes.first(body));
  (void)r.take(sizeof k_magic, "magic");
  const auto version = JC_TRY(r.get<std::uint32_t>("version"));
  if (version != k_bundle_format_version)
    return std::unexpected(bad("format version " + std::to_string(version) + ", this build reads " +
                               std::to_string(k_bundle_format_version)));
  const auto count = JC_TRY(r.get<std::uint32_t>("section count"));
  CompiledArtifact a;
  std::uint32_t previous = 0;
  bool have[k_tag_last + 1] = {};
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto tag = JC_TRY(r.get<std::uint32_t>("section tag"));
    if (tag == 0 || tag > k_tag_last) return std::unexpected(bad("unknown section tag " + std::to_string(tag)));
    if (tag <= previous) return std::unexpected(bad(std::string("section '") + tag_name(tag) + "' out of order"));
    previous = tag;
    have[tag] = true;
    const auto length = JC_TRY(r.get<std::uint64_t>("section length"));
    const auto data = JC_TRY(r.take(length, tag_name(tag)));
    switch (tag) {
      case k_tag_facts: {
        const auto json = nlohmann::json::parse(as_text(data), nullptr, false);
        if (!json.is_object()) return std::unexpected(bad("facts are not a JSON object"));
        for (const auto& [k, v] : json.items()) {
          if (!v.is_string()) return std::unexpected(bad("fact '" + k + "' is not a string"));
          a.facts[k] = v.get<std::string>();
        }
        break;
      }
      case k_tag_entry: a.entry = as_text(data); break;
      case k_tag_cubin:
        a.cubin.resize(data.size());
        std::memcpy(a.cubin.data(), data.data(), data.size());
        break;
      case k_tag_ptx:
        if (keep_text) a.ptx = as_text(data);
        break;
      case k_tag_log:
        if (keep_text) a.log = as_text(data);
        break;
      case k_tag_options: {
        const std::string text = as_text(data);
        std::size_t start = 0;
        for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
          a.options.push_back(text.substr(start, nl - start));
        break;
      }
      case k_tag_usage: {
        std::int32_t usage[4];
        if (data.size() != sizeof usage) return std::unexpected(bad("usage section has the wrong size"));
        std::memcpy(usage, data.data(), sizeof usage);
        a.usage = {usage[0], usage[1], usage[2], usage[3]};
        break;
      }
      case k_tag_compile_ms:
        if (data.size() != sizeof(double)) return std::unexpected(bad("compile_ms section has the wrong size"));
        std::memcpy(&a.compile_ms, data.data(), sizeof(double));
        break;
    }
  }
  if (r.at() != body) return std::unexpected(bad("trailing bytes after the last section"));
  for (std::uint32_t tag : {k_tag_facts, k_tag_entry, k_tag_cubin, k_tag_ptx, k_tag_usage})
    if (!have[tag]) return std::unexpected(bad(std::string("missing section '") + tag_name(tag) + "'"));
  return a;
}

}  // namespace

Result<CompiledArtifact> parse_source_bundle(std::span<const std::byte> bytes, BundleText text) {
  return parse_sections(bytes, text);
}

Result<CompiledArtifact> parse_bundle(std::span<const std::byte> bytes, BundleText text) {
  CompiledArtifact a = JC_TRY(parse_sections(bytes, text));
  auto spec = KernelSpec::from_facts(a.facts);
  if (!spec)
    return std::unexpected(
        bad("facts do not name a kernel spec (kernel, latent_scale, format or rope, target): " + spec.error().message));
  a.spec = *spec;
  return a;
}

}  // namespace jitcache
