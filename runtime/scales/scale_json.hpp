// Strict reading of the JSON that carries scale metadata (scales files and config.json).
// Stricter than nlohmann's defaults on purpose: a calibration file is security- and
// correctness-relevant input, so ambiguity is an error rather than a silent choice.
//   - UTF-8 only (checked before parsing, with the byte offset of the first bad byte);
//   - a duplicate key in any object is an error, not "last one wins";
//   - nesting deeper than a bound is refused while parsing, so hostile input can neither
//     exhaust the stack nor build a huge tree;
//   - NaN / Infinity tokens are invalid JSON (nlohmann already refuses them);
//   - files are read only when regular and no larger than a cap.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"

namespace jitcache::scales {

inline constexpr std::size_t k_max_json_depth = 64;
// A v1 file for a few hundred layers with provenance is a few KiB.
inline constexpr std::size_t k_max_scales_file_bytes = 1 << 20;
// Real config.json files with quantization ignore lists reach hundreds of KiB.
inline constexpr std::size_t k_max_config_file_bytes = 16 << 20;

// Offset of the first byte that does not belong to well-formed UTF-8 (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed), or nullopt.
std::optional<std::size_t> find_invalid_utf8(std::string_view text);

// Parses one JSON document. `file` names the input in error messages.
Result<nlohmann::json> parse_json_strict(std::string_view text, const std::string& file,
                                         std::size_t max_depth = k_max_json_depth);

// Reads a whole regular file of at most `max_bytes` bytes (read_regular_file of
// support/regular_file.hpp). FIFOs, devices and directories are refused without blocking.
// Errors name `display_name`, else the path.
Result<std::string> read_file_bounded(const std::filesystem::path& path, std::size_t max_bytes,
                                      std::string_view display_name = {});

// Shortest text that reads back as the same double ("0.5", "1e-05").
std::string format_number(double value);

}  // namespace jitcache::scales
