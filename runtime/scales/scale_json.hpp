// Strict reading of the JSON that carries scale metadata (scales files and config.json).
// Stricter than nlohmann's defaults on purpose: a calibration file is security- and
// correctness-relevant input, so ambiguity is an error rather than a silent choice.
//   - UTF-8 only (checked before parsing, with the byte offset of the first bad byte);
//   - a duplicate key in any object is an error, not "last one wins";
//   - nesting deeper than a bound is refused while parsing, so hostile input can neither
//     exhaust the stack nor build a huge tree;
//   - NaN / Infinity tokens are invalid JSON (nlohmann already refuses them);
//   - files are read only when regular and no larger than a cap (read_regular_file of
//     support/regular_file.hpp, with the caps below).
#pragma once

#include <cstddef>
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

// Parses one JSON document. `file` names the input in error messages.
Result<nlohmann::json> parse_json_strict(std::string_view text, const std::string& file,
                                         std::size_t max_depth = k_max_json_depth);

// Shortest text that reads back as the same double ("0.5", "1e-05").
std::string format_number(double value);

}  // namespace jitcache::scales
