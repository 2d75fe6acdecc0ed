// Writing a v1 scales file into a checkpoint (`jitcache scales install`): inline into
// config.json's `nvfp4_ds_mla_outer_scales`, or as a sidecar file with a {"file", "sha256"}
// reference there.
//
// config.json belongs to the checkpoint's publisher, so only the bytes of that one
// top-level value change: the document is strict-parsed first, the value's byte span is
// found by a scanner over the accepted text, and everything outside the span is kept as it
// was (key order, number spellings, indentation, other keys' escapes). The result is
// checked with the resolver's own code before anything is written, the sidecar is
// published before the config.json that names it, and both are written atomically.
//
// Installs on one checkpoint run one at a time, across processes: each holds an exclusive
// flock on `<checkpoint>/.jitcache-scales-install.lock`, a file that exists only while an
// install runs (support/file_lock.hpp), from before it reads config.json until it is done.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"

namespace jitcache::scales {

// One member of a JSON object's top level, as byte offsets into the document's text.
struct TopLevelMember {
  std::string key;             // decoded (escapes resolved)
  std::size_t lead_begin = 0;  // one past the '{' or ',' before the member
  std::size_t key_begin = 0;   // the key's opening quote
  std::size_t key_end = 0;     // one past its closing quote
  std::size_t value_begin = 0;
  std::size_t value_end = 0;   // one past the value's last byte
};

struct TopLevelObject {
  std::size_t open = 0;   // the '{'
  std::size_t close = 0;  // the '}'
  std::vector<TopLevelMember> members;
};

// The top-level members of `text`, a document parse_json_strict accepted whose top level is
// an object. `file` names it in errors (which mean the text was not such a document).
Result<TopLevelObject> scan_top_level_object(std::string_view text, const std::string& file);

// `text` with the top-level member `key` set to `value`, every other byte unchanged. An
// existing member keeps its key and separators and gets the new value in place; a missing
// one is added after the last member, spaced like it. In a file laid out one member per
// line, the value is printed with the member's indent as its step and the member's line
// break ("\n" or "\r\n"), shifted to the member's indent; in a one-line file it is
// printed compactly.
Result<std::string> splice_top_level_member(std::string_view text, const std::string& file,
                                            std::string_view key,
                                            const nlohmann::ordered_json& value);

enum class InstallForm { inline_object, sidecar };
enum class ReplaceScales { no, yes };

const char* to_string(InstallForm form);  // "inline" | "sidecar"

struct InstallOptions {
  std::filesystem::path file;            // the v1 scales file to install
  std::filesystem::path checkpoint_dir;  // holds config.json
  InstallForm form = InstallForm::inline_object;
  std::string sidecar_name;  // InstallForm::sidecar: relative to the checkpoint directory
  ReplaceScales replace = ReplaceScales::no;
  // As for resolve_scales: else the snapshots/<rev> directory name, else unknown.
  std::optional<std::string> checkpoint_revision;
};

struct InstallResult {
  std::filesystem::path config_file;  // <checkpoint>/config.json
  InstallForm form = InstallForm::inline_object;
  std::string sidecar_name;           // as given; empty when inline
  std::filesystem::path sidecar_path; // where the sidecar was written (or already was)
  bool sidecar_written = false;       // false when that file already held exactly these bytes
  std::string sha256;                 // of the installed file's bytes
  // What config.json held before: none, inline or sidecar (with its file as written).
  CheckpointForm previous_form = CheckpointForm::none;
  std::string previous_file;
  // A replaced sidecar of another name is never deleted: it stays, unreferenced.
  bool previous_sidecar_left = false;
  ResolvedScales resolved;  // resolve_scales on the checkpoint after writing
};

// Installs `options.file` into the checkpoint. Refused, with nothing written: a file that is
// invalid or does not fit the model (num_layers, latent_dim) or the checkpoint's known
// revision; existing scales without ReplaceScales::yes; a sidecar name that is absolute,
// leaves the checkpoint (lexically or through a symlink) or already holds other bytes
// (without ReplaceScales::yes), or is config.json; a config.json that is a symlink (the
// resolver would follow it, and writing through it could change a shared file such as a
// Hugging Face blob). A checkpoint that resolved before resolves at every moment of the
// install and after it: replacing the very sidecar config.json pins goes through an interim
// config.json that holds the new scales inline.
Result<InstallResult> install_scales(const InstallOptions& options);

nlohmann::json to_json(const InstallResult& result);

}  // namespace jitcache::scales
