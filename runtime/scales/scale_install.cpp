#include "runtime/scales/scale_install.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <utility>

#include "runtime/scales/model_config.hpp"
#include "runtime/scales/scale_file.hpp"
#include "runtime/scales/scale_json.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "support/atomic_file.hpp"
#include "support/file_lock.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"

namespace jitcache::scales {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// In the checkpoint directory, only while an install runs (support/file_lock.hpp).
constexpr const char* k_install_lock_name = ".jitcache-scales-install.lock";
constexpr std::chrono::seconds k_install_lock_timeout{60};

bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Walks text that parse_json_strict has accepted, so it only has to find boundaries, not
// judge: a string ends at the first unescaped quote, a container at its matching bracket
// (brackets inside strings skipped), a scalar at the next delimiter.
class Scanner {
 public:
  Scanner(std::string_view text, const std::string& file) : m_text(text), m_file(file) {
    // nlohmann (and so parse_json_strict) skips a UTF-8 byte order mark.
    if (m_text.starts_with("\xEF\xBB\xBF")) m_pos = 3;
  }

  std::size_t pos() const { return m_pos; }
  void skip_space() {
    while (m_pos < m_text.size() && is_json_space(m_text[m_pos])) ++m_pos;
  }
  bool at(char c) const { return m_pos < m_text.size() && m_text[m_pos] == c; }

  Status expect(char c) {
    if (!at(c)) return unexpected(std::string("'") + c + "'");
    ++m_pos;
    return {};
  }

  Status skip_string() {
    JC_TRY(expect('"'));
    while (m_pos < m_text.size()) {
      const char c = m_text[m_pos++];
      if (c == '\\') {
        ++m_pos;  // the escaped character; \uXXXX's hex digits need no special case
      } else if (c == '"') {
        return {};
      }
    }
    return unexpected("the end of a string");
  }

  Status skip_value() {
    if (at('"')) return skip_string();
    if (at('{') || at('[')) {
      int depth = 0;
      while (m_pos < m_text.size()) {
        const char c = m_text[m_pos];
        if (c == '"') {
          JC_TRY(skip_string());
          continue;
        }
        ++m_pos;
        if (c == '{' || c == '[') ++depth;
        if ((c == '}' || c == ']') && --depth == 0) return {};
      }
      return unexpected("the end of a container");
    }
    const std::size_t start = m_pos;
    while (m_pos < m_text.size() && !is_json_space(m_text[m_pos]) && m_text[m_pos] != ',' &&
           m_text[m_pos] != '}' && m_text[m_pos] != ']')
      ++m_pos;
    if (m_pos == start) return unexpected("a value");
    return {};
  }

  std::unexpected<Error> unexpected(const std::string& wanted) const {
    return make_error(ErrorCode::internal,
                      m_file + ": cannot locate the top-level members of the accepted JSON: "
                               "expected " + wanted + " at byte " + std::to_string(m_pos));
  }

 private:
  std::string_view m_text;
  const std::string& m_file;
  std::size_t m_pos = 0;
};

// The indent of a member whose lead (the bytes between the '{' or ',' and its key) starts a
// new line; nullopt for a member on the same line as what precedes it.
// How a member sits in a file laid out one member per line: the line break before it
// ("\n", or "\r\n" in a file written on Windows) and its indent, which for a top-level
// member is also the file's indent step (two spaces, four, a tab).
struct LineLayout {
  std::string newline;
  std::string indent;
};

std::optional<LineLayout> line_layout(std::string_view lead) {
  const std::size_t newline = lead.rfind('\n');
  if (newline == std::string_view::npos) return std::nullopt;
  const bool crlf = newline > 0 && lead[newline - 1] == '\r';
  return LineLayout{crlf ? "\r\n" : "\n", std::string(lead.substr(newline + 1))};
}

// The value as the file would have written it: compact in a one-line file, else printed
// with the file's indent step and line breaks and shifted to the member's indent.
std::string value_text(const ordered_json& value, const std::optional<LineLayout>& layout) {
  if (!layout) return value.dump(-1, ' ', false, ordered_json::error_handler_t::strict);
  const std::string& indent = layout->indent;
  const bool tabs = !indent.empty() && indent.find_first_not_of('\t') == std::string::npos;
  const bool spaces = !indent.empty() && indent.find_first_not_of(' ') == std::string::npos;
  const int step = tabs || spaces ? static_cast<int>(indent.size()) : 2;
  const std::string pretty =
      value.dump(step, tabs ? '\t' : ' ', false, ordered_json::error_handler_t::strict);
  // A JSON text has no raw newline inside a string, so every '\n' is a line break.
  std::string out;
  out.reserve(pretty.size());
  for (const char c : pretty) {
    if (c != '\n') {
      out += c;
      continue;
    }
    out += layout->newline;
    out += indent;
  }
  return out;
}

std::string field_of(const std::string& config_name, const std::string& subfield = {}) {
  return config_name + ": field '" + k_scales_config_field + subfield + "'";
}

std::string describe_form(CheckpointForm form, const std::string& file) {
  if (form == CheckpointForm::sidecar) return "a sidecar reference to " + file;
  return "an inline object";
}

// What config.json's scales field holds now; a malformed value counts as inline (it is
// replaced the same way).
std::pair<CheckpointForm, std::string> current_form(const CheckpointConfig& config) {
  if (!config.scales_field) return {CheckpointForm::none, {}};
  const auto parsed = parse_checkpoint_field(*config.scales_field, config.path.string());
  if (parsed) {
    if (const auto* ref = std::get_if<SidecarReference>(&*parsed))
      return {CheckpointForm::sidecar, ref->file};
  }
  return {CheckpointForm::inline_object, {}};
}

struct SidecarTarget {
  fs::path path;  // the real directory / the file name: where the atomic rename lands
  bool exists = false;
  std::string bytes;  // the present file's bytes, when it exists
};

// The sandbox rules of a sidecar reference (resolve_sidecar_path), applied to a file that
// may not exist yet: the name itself when it does, else its directory. The write goes to the
// real directory, never through a symlink in the last component.
Result<SidecarTarget> sidecar_target(const fs::path& checkpoint_dir, const std::string& name,
                                     const std::string& config_name) {
  const fs::path normal = fs::path(name).lexically_normal();
  SidecarTarget target;
  auto existing = resolve_sidecar_path(checkpoint_dir, name, config_name);
  if (!existing && existing.error().code != ErrorCode::not_found)
    return std::unexpected(std::move(existing.error()));
  const fs::path file_name = normal.filename();
  if (file_name.empty() || file_name == "." || file_name == "..") {
    return make_error(ErrorCode::invalid_argument,
                      field_of(config_name, ".file") + ": \"" + name + "\" names a directory, not a file");
  }
  fs::path dir;
  if (normal.parent_path().empty()) {
    std::error_code ec;
    dir = fs::canonical(checkpoint_dir, ec);
    if (ec)
      return make_error(ErrorCode::io, checkpoint_dir.string() +
                                           ": cannot resolve the checkpoint directory: " + ec.message());
  } else {
    dir = JC_TRY(resolve_sidecar_path(checkpoint_dir, normal.parent_path().string(), config_name));
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return make_error(ErrorCode::invalid_argument,
                        field_of(config_name, ".file") + ": \"" + name + "\": " + dir.string() +
                            " is not a directory");
  }
  target.path = dir / file_name;
  if (existing) {
    target.exists = true;
    target.bytes = JC_TRY(read_regular_file(*existing, k_max_scales_file_bytes,
                                            (checkpoint_dir / name).string()));
  } else {
    // A dangling symlink (or anything else) under the name: the rename would replace it.
    struct stat st {};
    if (::lstat(target.path.c_str(), &st) == 0) {
      return make_error(ErrorCode::unsafe,
                        field_of(config_name, ".file") + ": \"" + name + "\" is " +
                            std::string(file_type_name(st.st_mode)) +
                            " that does not lead to a file in the checkpoint; refusing to replace it");
    }
  }
  return target;
}

// A count mismatch names the checkpoint's side too: the scales file's field is in the
// validator's message, config.json's here.
Error with_checkpoint_counts(Error error, const std::string& bytes, const std::string& name,
                             const CheckpointConfig& config) {
  const auto alone = parse_scale_file(bytes, name, {});
  if (alone && (alone->num_layers != config.model.num_hidden_layers ||
                alone->latent_dim != config.model.kv_lora_rank)) {
    error.message += "; the checkpoint's " + config.path.string() + " has field 'num_hidden_layers' " +
                     std::to_string(config.model.num_hidden_layers) + " and field 'kv_lora_rank' " +
                     std::to_string(config.model.kv_lora_rank);
  }
  return error;
}

// The new config.json, read back with the resolver's own steps: strict JSON, the model
// fields, the scales field (and an inline object's validation). Everything but the scales
// field must read back as before.
Status check_new_config(const std::string& new_text, const std::string& old_text,
                        const std::string& config_name, const CheckpointConfig& config,
                        const ScaleFileContents& contents, InstallForm form,
                        const std::string& sidecar_name, const std::string& sha256) {
  json updated = JC_TRY(parse_json_strict(new_text, config_name));
  json before = JC_TRY(parse_json_strict(old_text, config_name));
  JC_TRY(parse_model_config(updated, config_name));
  const auto field = updated.find(k_scales_config_field);
  if (field == updated.end())
    return make_error(ErrorCode::internal, field_of(config_name) + ": missing after the edit");
  const CheckpointScales parsed = JC_TRY(parse_checkpoint_field(*field, config_name));
  if (form == InstallForm::inline_object) {
    const auto* object = std::get_if<json>(&parsed);
    if (object == nullptr)
      return make_error(ErrorCode::internal, field_of(config_name) + ": not inline after the edit");
    const Expectations expected{config.model.num_hidden_layers, config.model.kv_lora_rank};
    const ScaleFileContents read_back = JC_TRY(validate_scale_object(
        *object, config_name, std::string(k_scales_config_field) + ".", expected));
    if (read_back.scales != contents.scales || read_back.max_abs != contents.max_abs)
      return make_error(ErrorCode::internal,
                        field_of(config_name) + ": the edited value does not read back as the file's scales");
  } else {
    const auto* ref = std::get_if<SidecarReference>(&parsed);
    if (ref == nullptr || ref->file != sidecar_name || ref->sha256 != sha256)
      return make_error(ErrorCode::internal,
                        field_of(config_name) + ": the edited reference does not read back");
  }
  updated.erase(k_scales_config_field);
  before.erase(k_scales_config_field);
  if (updated != before)
    return make_error(ErrorCode::internal,
                      config_name + ": the edit changed fields other than " + k_scales_config_field);
  return {};
}

// The scales file as an inline value, in the file's own key order (the strict parse before
// already refused duplicates and depth).
Result<ordered_json> inline_value(const std::string& bytes, const std::string& name) {
  ordered_json value = ordered_json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded())
    return make_error(ErrorCode::internal, name + ": accepted by the strict reader but not re-readable");
  return value;
}

bool same_file(const fs::path& a, const fs::path& b) {
  struct stat sa {}, sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

Status write_atomically(const fs::path& path, std::string_view bytes, mode_t mode) {
  AtomicFileOptions options;
  options.mode = mode;
  options.mode_rule = ModeRule::exact;
  AtomicFileWriter writer = JC_TRY(AtomicFileWriter::create(path, options));
  JC_TRY(writer.write(bytes));
  return writer.commit();
}

}  // namespace

const char* to_string(InstallForm form) {
  return form == InstallForm::sidecar ? "sidecar" : "inline";
}

Result<TopLevelObject> scan_top_level_object(std::string_view text, const std::string& file) {
  Scanner s(text, file);
  TopLevelObject object;
  s.skip_space();
  object.open = s.pos();
  JC_TRY(s.expect('{'));
  std::size_t lead_begin = s.pos();
  s.skip_space();
  if (!s.at('}')) {
    for (;;) {
      TopLevelMember member;
      member.lead_begin = lead_begin;
      s.skip_space();
      member.key_begin = s.pos();
      JC_TRY(s.skip_string());
      member.key_end = s.pos();
      const json key = json::parse(text.substr(member.key_begin, member.key_end - member.key_begin),
                                   nullptr, false);
      if (!key.is_string()) return s.unexpected("a key");
      member.key = key.get<std::string>();
      s.skip_space();
      JC_TRY(s.expect(':'));
      s.skip_space();
      member.value_begin = s.pos();
      JC_TRY(s.skip_value());
      member.value_end = s.pos();
      object.members.push_back(std::move(member));
      s.skip_space();
      if (!s.at(',')) break;
      JC_TRY(s.expect(','));
      lead_begin = s.pos();
    }
  }
  object.close = s.pos();
  JC_TRY(s.expect('}'));
  return object;
}

Result<std::string> splice_top_level_member(std::string_view text, const std::string& file,
                                            std::string_view key, const ordered_json& value) {
  const TopLevelObject object = JC_TRY(scan_top_level_object(text, file));
  const auto lead_of = [&](const TopLevelMember& m) {
    return text.substr(m.lead_begin, m.key_begin - m.lead_begin);
  };
  for (const TopLevelMember& m : object.members) {
    if (m.key != key) continue;
    std::string out(text.substr(0, m.value_begin));
    out += value_text(value, line_layout(lead_of(m)));
    out += text.substr(m.value_end);
    return out;
  }
  const std::string key_text = json(std::string(key)).dump();
  if (object.members.empty()) {
    std::string out(text.substr(0, object.open + 1));
    out += "\n  " + key_text + ": " + value_text(value, LineLayout{"\n", "  "}) + "\n";
    out += text.substr(object.open + 1);
    return out;
  }
  // Spaced like the last member: its lead (newline and indent, or none) and its ": ".
  const TopLevelMember& last = object.members.back();
  const std::string_view lead = lead_of(last);
  const std::string_view separator = text.substr(last.key_end, last.value_begin - last.key_end);
  std::string out(text.substr(0, last.value_end));
  out += ",";
  out += lead;
  out += key_text;
  out += separator;
  out += value_text(value, line_layout(lead));
  out += text.substr(last.value_end);
  return out;
}

Result<InstallResult> install_scales(const InstallOptions& options) {
  // One install at a time per checkpoint, across processes: two that interleave would leave
  // config.json pinning one file's hash over the other's bytes. The lock is taken before
  // config.json is read, so each install starts from what the one before it left.
  std::error_code ec;
  const fs::path real_dir = fs::canonical(options.checkpoint_dir, ec);
  if (ec || !fs::is_directory(real_dir, ec)) JC_TRY(read_checkpoint_config(options.checkpoint_dir));
  auto lock = FileLock::acquire(real_dir / k_install_lock_name, k_install_lock_timeout,
                                "another `jitcache scales install` on this checkpoint");
  if (!lock) return std::unexpected(std::move(lock.error()));
  const CheckpointConfig config = JC_TRY(read_checkpoint_config(options.checkpoint_dir));
  const std::string config_name = config.path.string();

  // The resolver follows a symlinked config.json; writing through one could change a file
  // shared with other checkpoints (a Hugging Face blob), and replacing it would silently
  // turn a link into a copy. Neither is this command's call to make.
  struct stat config_stat {};
  if (::lstat(config.path.c_str(), &config_stat) != 0)
    return make_error(ErrorCode::io, config_name + ": " + std::strerror(errno));
  if (!S_ISREG(config_stat.st_mode)) {
    return make_error(ErrorCode::unsafe,
                      config_name + " is " + std::string(file_type_name(config_stat.st_mode)) +
                          ", not a regular file; install into a copy of the checkpoint whose "
                          "config.json is a regular file (cp -rL)");
  }
  const std::string config_text = JC_TRY(read_regular_file(
      config.path, k_max_config_file_bytes, config_name, FollowSymlinks::no));
  if (sha256_hex(config_text) != config.sha256)
    return make_error(ErrorCode::io, config_name + ": changed while being read; try again");

  // The file must fit the model and the known revision: validate_scales_file makes the same
  // checks (and learns the revision the same way) as resolving does.
  const std::string name = options.file.string();
  const std::string bytes = JC_TRY(read_regular_file(options.file, k_max_scales_file_bytes));
  ValidateOptions validate;
  validate.file = options.file;
  validate.checkpoint_dir = options.checkpoint_dir;
  validate.checkpoint_revision = options.checkpoint_revision;
  auto validated = validate_scales_file(validate);
  if (!validated)
    return std::unexpected(with_checkpoint_counts(std::move(validated.error()), bytes, name, config));
  const std::string digest = sha256_hex(bytes);
  if (digest != validated->sha256)
    return make_error(ErrorCode::io, name + ": changed while being read; try again");
  const ScaleFileContents& contents = validated->contents;

  InstallResult result;
  result.config_file = config.path;
  result.form = options.form;
  result.sha256 = digest;
  std::tie(result.previous_form, result.previous_file) = current_form(config);
  if (result.previous_form != CheckpointForm::none && options.replace == ReplaceScales::no) {
    return make_error(ErrorCode::invalid_input,
                      field_of(config_name) + ": the checkpoint already has scales (" +
                          describe_form(result.previous_form, result.previous_file) +
                          "); use --replace to replace them");
  }

  SidecarTarget sidecar;
  ordered_json value;
  if (options.form == InstallForm::sidecar) {
    if (options.sidecar_name.empty())
      return make_error(ErrorCode::invalid_argument, field_of(config_name, ".file") + ": empty sidecar name");
    sidecar = JC_TRY(sidecar_target(options.checkpoint_dir, options.sidecar_name, config_name));
    // The output rule of every command (config.json is this one's input); the file config.json
    // pins now is this command's to replace, since it pins the new one in the same step.
    if (!(sidecar.exists && sidecar.bytes == bytes)) {
      if (auto ok = check_output_target(sidecar.path, std::span(&config.path, 1)); !ok) {
        ok.error().message = field_of(config_name, ".file") + ": " + ok.error().message;
        return std::unexpected(std::move(ok.error()));
      }
    }
    if (sidecar.exists && sidecar.bytes != bytes && options.replace == ReplaceScales::no) {
      return make_error(ErrorCode::invalid_input,
                        (options.checkpoint_dir / options.sidecar_name).string() +
                            ": already exists with other content (sha256 " +
                            sha256_hex(sidecar.bytes) + ", the file to install has " + digest +
                            "); use --replace to overwrite it");
    }
    result.sidecar_name = options.sidecar_name;
    result.sidecar_path = sidecar.path;
    value = ordered_json{{"file", options.sidecar_name}, {"sha256", digest}};
  } else {
    value = JC_TRY(inline_value(bytes, name));
  }
  if (result.previous_form == CheckpointForm::sidecar) {
    const bool same = options.form == InstallForm::sidecar &&
                      fs::path(result.previous_file).lexically_normal() ==
                          fs::path(options.sidecar_name).lexically_normal();
    result.previous_sidecar_left = !same;
  }

  const std::string new_text =
      JC_TRY(splice_top_level_member(config_text, config_name, k_scales_config_field, value));
  JC_TRY(check_new_config(new_text, config_text, config_name, config, contents, options.form,
                          options.sidecar_name, digest));

  // config.json never names a file that is missing, partial or other than it pins, so a
  // checkpoint that resolved before resolves at every moment of the install and after it: a
  // new sidecar is written before the config.json that names it, and one that replaces the
  // very file config.json pins now is written while config.json holds the new scales inline.
  const mode_t mode = config_stat.st_mode & 07777;
  const bool write_sidecar = options.form == InstallForm::sidecar && !(sidecar.exists && sidecar.bytes == bytes);
  std::string on_disk = config_text;  // what config.json holds, as this install last left it
  // Someone else's edit since it was read would be lost by the rename: refuse instead.
  const auto replace_config = [&](const std::string& text) -> Status {
    const std::string current = JC_TRY(read_regular_file(
        config.path, k_max_config_file_bytes, config_name, FollowSymlinks::no));
    if (current != on_disk) {
      return make_error(ErrorCode::io,
                        config_name + ": changed while the scales were being installed; it was not "
                                      "written" +
                            (result.sidecar_written ? " (the sidecar " + sidecar.path.string() + " was)" : "") +
                            "; try again");
    }
    JC_TRY(write_atomically(config.path, text, mode));
    on_disk = text;
    return {};
  };
  if (write_sidecar && result.previous_form == CheckpointForm::sidecar &&
      same_file(sidecar.path, options.checkpoint_dir / result.previous_file)) {
    const std::string interim = JC_TRY(splice_top_level_member(
        config_text, config_name, k_scales_config_field, JC_TRY(inline_value(bytes, name))));
    JC_TRY(check_new_config(interim, config_text, config_name, config, contents, InstallForm::inline_object,
                            {}, digest));
    JC_TRY(replace_config(interim));
  }
  if (write_sidecar) {
    JC_TRY(write_atomically(sidecar.path, bytes, mode));
    result.sidecar_written = true;
  }
  JC_TRY(replace_config(new_text));

  ResolveOptions resolve;
  resolve.checkpoint_dir = options.checkpoint_dir;
  resolve.checkpoint_revision = options.checkpoint_revision;
  resolve.env = EnvOverride::ignore;  // the checkpoint's own metadata is what was installed
  auto resolved = resolve_scales(resolve);
  if (!resolved) {
    Error error = std::move(resolved.error());
    error.message = config_name + ": written, but the checkpoint does not resolve: " + error.message;
    return std::unexpected(std::move(error));
  }
  const ScaleProvenance& p = resolved->provenance;
  const CheckpointForm expected_form =
      options.form == InstallForm::sidecar ? CheckpointForm::sidecar : CheckpointForm::inline_object;
  bool same_scales = p.source == ScaleSource::checkpoint && p.checkpoint_form == expected_form &&
                     resolved->num_hidden_layers == contents.num_layers;
  for (int i = 0; same_scales && i < contents.num_layers; ++i) {
    const auto layer = static_cast<std::size_t>(i);
    same_scales = resolved->layers[layer].scale == static_cast<float>(contents.scales[layer]);
  }
  if (!same_scales) {
    return make_error(ErrorCode::internal,
                      config_name + ": written, but resolving the checkpoint does not give the "
                                    "installed scales (source " + to_string(p.source) + ", form " +
                          to_string(p.checkpoint_form) + ")");
  }
  result.resolved = std::move(*resolved);
  return result;
}

json to_json(const InstallResult& r) {
  json previous = nullptr;
  if (r.previous_form != CheckpointForm::none) {
    previous = {{"form", to_string(r.previous_form)},
                {"file", r.previous_file.empty() ? json(nullptr) : json(r.previous_file)},
                {"left_in_place", r.previous_sidecar_left}};
  }
  return {{"config", r.config_file.string()},
          {"form", to_string(r.form)},
          {"sidecar", r.sidecar_name.empty() ? json(nullptr) : json(r.sidecar_name)},
          {"sidecar_written", r.sidecar_written},
          {"sha256", r.sha256},
          {"previous", std::move(previous)},
          {"resolved", to_json(r.resolved)}};
}

}  // namespace jitcache::scales
