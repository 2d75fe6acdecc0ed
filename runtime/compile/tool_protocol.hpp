// The tool worker's messages (tool_worker.hpp): length-prefixed CBOR frames, and the
// conversions of SourceInput, SourceOutput, Error and stage notes to and from them. Every
// free text travels as CBOR bytes: bitcode, a cubin and a tool's log need not be UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/source_compiler.hpp"

namespace jitcache::tool_protocol {

// The largest frame either side accepts; a longer length is a garbled stream.
inline constexpr std::uint32_t k_max_frame_bytes = 512u << 20;

using Bytes = std::vector<std::uint8_t>;

// Writes one frame (length, then payload) with send(MSG_NOSIGNAL): a closed peer is an
// error (EPIPE), never a SIGPIPE. Returns 0 or the errno.
int send_frame(int fd, const Bytes& payload);

// Appends `length` prefix bytes and payload for one frame to `out` (no I/O).
void append_frame(Bytes& out, const Bytes& payload);

// Takes one complete frame off the front of `buffer`, if it holds one. A length above
// k_max_frame_bytes is an error.
Result<std::optional<Bytes>> take_frame(Bytes& buffer);

Bytes encode_request(const SourceInput& input);
Result<SourceInput> decode_request(const Bytes& frame);

Bytes encode_stage(const std::string& tool, const std::string& stage);
Bytes encode_result(const Result<SourceOutput>& result);

// One frame from the worker: a stage note, or the final answer.
struct Reply {
  bool is_stage = false;
  std::string tool, stage;         // a stage note
  Result<SourceOutput> result = make_error(ErrorCode::internal, "no result");  // the answer
};
Result<Reply> decode_reply(const Bytes& frame);

}  // namespace jitcache::tool_protocol
