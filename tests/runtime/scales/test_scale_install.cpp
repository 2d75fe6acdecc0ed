// Installing a scales file into a checkpoint: the byte-faithful config.json edit, the
// checks that refuse a file or a name before anything is written, and the round trip
// through the resolver.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <optional>
#include <random>
#include <string>

#include "jitcache/scales.hpp"
#include "runtime/scales/scale_install.hpp"
#include "runtime/scales/scale_json.hpp"
#include "support/sha256.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::testing;
using nlohmann::ordered_json;
using scales::InstallForm;
using scales::InstallOptions;
using scales::ReplaceScales;

constexpr const char* k_key = "nvfp4_ds_mla_outer_scales";

// The member `key`'s value span in `text` (which must have it).
scales::TopLevelMember member_of(const std::string& text, const std::string& key) {
  const auto object = scales::scan_top_level_object(text, "config.json");
  EXPECT_TRUE(object.has_value()) << object.error().to_string();
  for (const auto& m : object->members)
    if (m.key == key) return m;
  ADD_FAILURE() << "no member " << key << " in:\n" << text;
  return {};
}

// `after` is `before` with exactly the value of `key` replaced (or, when `before` lacks
// the key, with exactly one member inserted after `before`'s last member).
void expect_only_the_value_changed(const std::string& before, const std::string& after) {
  const scales::TopLevelMember now = member_of(after, k_key);
  const auto old_object = scales::scan_top_level_object(before, "config.json");
  ASSERT_TRUE(old_object.has_value());
  for (const auto& m : old_object->members) {
    if (m.key != k_key) continue;
    EXPECT_EQ(after.substr(0, now.value_begin), before.substr(0, m.value_begin));
    EXPECT_EQ(after.substr(now.value_end), before.substr(m.value_end));
    return;
  }
  // Inserted: everything up to the old last value's end, then ",", the member, the rest.
  const auto& last = old_object->members.back();
  EXPECT_EQ(after.substr(0, last.value_end), before.substr(0, last.value_end));
  EXPECT_EQ(after[last.value_end], ',');
  EXPECT_EQ(after.substr(now.value_end), before.substr(last.value_end));
}

ordered_json small_value() {
  return ordered_json{{"file", "s.json"}, {"sha256", std::string(64, 'a')}};
}

// `value` spliced into `before` as its member k_key, every other byte of `before` kept;
// nothing (and a failure) when the splice is refused.
std::optional<std::string> spliced(const std::string& before, const ordered_json& value = small_value()) {
  auto after = scales::splice_top_level_member(before, "config.json", k_key, value);
  EXPECT_OK(after);
  if (!after) return std::nullopt;
  expect_only_the_value_changed(before, *after);
  return std::move(*after);
}

// Expects small_value() spliced into `before` to give exactly `expected`; the spliced text.
std::optional<std::string> expect_spliced_as(const std::string& before, const std::string& expected) {
  auto after = spliced(before);
  if (after) EXPECT_EQ(*after, expected);
  return after;
}

TEST(ScaleSplice, ReplacesOnlyTheValueInAPrettyFile) {
  const std::string before =
      "{\n  \"num_hidden_layers\": 78,\n  \"nvfp4_ds_mla_outer_scales\": {\"file\": \"old.json\", "
      "\"sha256\": \"" + std::string(64, 'b') + "\"},\n  \"x\": 1.50e0\n}\n";
  const auto after = spliced(before);
  ASSERT_TRUE(after);
  // Pretty-printed, shifted to the member's indent.
  EXPECT_CONTAINS(*after, "\"nvfp4_ds_mla_outer_scales\": {\n    \"file\": \"s.json\",\n    \"sha256\"");
  EXPECT_CONTAINS(*after, "\"\n  },\n  \"x\": 1.50e0\n}\n");
  EXPECT_EQ(json::parse(*after)[k_key]["file"], "s.json");
}

TEST(ScaleSplice, InsertsAfterTheLastMemberWithItsIndent) {
  // The file's own indent step (4 here) inside the new value too.
  expect_spliced_as("{\n    \"a\": [1, 2],\n    \"num_hidden_layers\": 78\n}",
                    "{\n    \"a\": [1, 2],\n    \"num_hidden_layers\": 78,\n    \"nvfp4_ds_mla_outer_scales\": {\n"
                    "        \"file\": \"s.json\",\n        \"sha256\": \"" +
                        std::string(64, 'a') + "\"\n    }\n}");
}

TEST(ScaleSplice, KeepsWindowsLineBreaks) {
  const auto after = expect_spliced_as(
      "{\r\n  \"a\": 1,\r\n  \"num_hidden_layers\": 78\r\n}\r\n",
      "{\r\n  \"a\": 1,\r\n  \"num_hidden_layers\": 78,\r\n  \"nvfp4_ds_mla_outer_scales\": {\r\n"
      "    \"file\": \"s.json\",\r\n    \"sha256\": \"" +
          std::string(64, 'a') + "\"\r\n  }\r\n}\r\n");
  ASSERT_TRUE(after);
  // No bare line feed anywhere: every break is the file's own.
  for (std::size_t i = 0; i < after->size(); ++i) {
    if ((*after)[i] == '\n') {
      ASSERT_TRUE(i > 0 && (*after)[i - 1] == '\r') << "bare LF at " << i;
    }
  }
}

TEST(ScaleSplice, KeepsTabIndentsAndCompactFilesInTheirStyle) {
  const std::string tabs = "{\n\t\"a\": 1\n}\n";
  auto after = scales::splice_top_level_member(tabs, "config.json", k_key, ordered_json{{"k", {1, 2}}});
  ASSERT_OK(after);
  EXPECT_EQ(*after, "{\n\t\"a\": 1,\n\t\"nvfp4_ds_mla_outer_scales\": {\n\t\t\"k\": [\n\t\t\t1,\n\t\t\t2\n\t\t]\n\t}\n}\n");

  const std::string compact = R"({"a":1,"b":{"c":[1,2]},"nvfp4_ds_mla_outer_scales":{"file":"x","sha256":"y"},"d":"e"})";
  const auto one_line = spliced(compact);
  ASSERT_TRUE(one_line);
  EXPECT_EQ(one_line->find('\n'), std::string::npos) << "a one-line file stays one line: " << *one_line;

  const std::string compact_absent = R"({"a": 1, "b": 2})";
  const auto inserted = spliced(compact_absent);
  ASSERT_TRUE(inserted);
  EXPECT_EQ(*inserted, R"({"a": 1, "b": 2, "nvfp4_ds_mla_outer_scales": {"file":"s.json","sha256":")" +
                        std::string(64, 'a') + "\"}}");
}

TEST(ScaleSplice, StringsWithEscapesAndBracketsDoNotConfuseTheScanner) {
  // Keys and values with escaped quotes, backslashes and brackets before the scales key; a
  // key of the same name nested in another object; the scales key spelt with an escape.
  const std::string before =
      "{\"we\\\"ird\\\\\": \"va\\\"l}ue\\\\\", \"q\": {\"nvfp4_ds_mla_outer_scales\": [\"]\", \"{\"]},\n"
      " \"nvfp4\\u005fds_mla_outer_scales\" :  {\"file\": \"a\\\"b\", \"sha256\": \"c\"} , \"z\": "
      "[1, {\"b\": \"]\"}], \"t\": true, \"n\": null, \"f\": -1.5e-3}";
  ASSERT_OK(scales::parse_json_strict(before, "config.json"));
  const auto object = scales::scan_top_level_object(before, "config.json");
  ASSERT_OK(object);
  ASSERT_EQ(object->members.size(), 7u);
  EXPECT_EQ(object->members[0].key, "we\"ird\\");
  EXPECT_EQ(object->members[2].key, k_key);
  EXPECT_EQ(before.substr(object->members[6].value_begin,
                          object->members[6].value_end - object->members[6].value_begin),
            "-1.5e-3");

  const auto after = spliced(before);
  ASSERT_TRUE(after);
  const json parsed = json::parse(*after);
  EXPECT_EQ(parsed[k_key]["file"], "s.json");
  EXPECT_EQ(parsed["q"][k_key], json::parse(R"(["]", "{"])"));
  EXPECT_EQ(parsed["we\"ird\\"], "va\"l}ue\\");
}

TEST(ScaleSplice, ByteOrderMarkAndEmptyObject) {
  const std::string bom = "\xEF\xBB\xBF{\"a\": 1}";
  auto after = scales::splice_top_level_member(bom, "config.json", k_key, small_value());
  ASSERT_OK(after);
  // Spaced like the last member, which follows the '{' directly.
  EXPECT_TRUE(after->starts_with("\xEF\xBB\xBF{\"a\": 1,\"nvfp4_ds_mla_outer_scales\": {")) << *after;
  after = scales::splice_top_level_member("{}", "config.json", k_key, ordered_json{{"k", 1}});
  ASSERT_OK(after);
  EXPECT_EQ(*after, "{\n  \"nvfp4_ds_mla_outer_scales\": {\n    \"k\": 1\n  }\n}");
}

// Random documents, pretty or compact, with or without the key: the edit reads back as the
// old document with only the key's value changed, and every other byte is where it was.
TEST(ScaleSplice, RandomDocumentsKeepEverythingElse) {
  const std::uint64_t seed = test_seed("splice documents");
  std::mt19937_64 rng(seed);
  const std::vector<std::string> strings = {"plain", "quo\"te", "back\\slash", "br}ack]ets{[",
                                            "uni\xC3\xA9", "tab\t", "nvfp4_ds_mla_outer_scales"};
  const auto random_value = [&](auto& self, int depth) -> ordered_json {
    switch (rng() % (depth > 2 ? 4 : 6)) {
      case 0: return static_cast<double>(rng() % 100000) / 7.0;
      case 1: return strings[rng() % strings.size()];
      case 2: return rng() % 2 == 0;
      case 3: return nullptr;
      case 4: {
        ordered_json array = ordered_json::array();
        for (std::size_t i = rng() % 4; i > 0; --i) array.push_back(self(self, depth + 1));
        return array;
      }
      default: {
        ordered_json object = ordered_json::object();
        for (std::size_t i = rng() % 4; i > 0; --i)
          object[strings[rng() % strings.size()] + std::to_string(i)] = self(self, depth + 1);
        return object;
      }
    }
  };
  for (int round = 0; round < 200; ++round) {
    ordered_json document = ordered_json::object();
    const std::size_t members = 1 + rng() % 6;
    const std::size_t key_at = rng() % (members + 1);  // == members: absent
    for (std::size_t i = 0; i < members; ++i) {
      if (i == key_at) document[k_key] = random_value(random_value, 1);
      document[strings[rng() % strings.size()] + "#" + std::to_string(i)] = random_value(random_value, 1);
    }
    const int indent = static_cast<int>(rng() % 3) * 2 - 1;  // -1 (compact), 1, 3
    const std::string before = document.dump(indent);
    const ordered_json value = random_value(random_value, 1);
    const auto after = scales::splice_top_level_member(before, "config.json", k_key, value);
    ASSERT_OK(after);
    SCOPED_TRACE("seed " + std::to_string(seed) + " round " + std::to_string(round) + "\n" + before);
    expect_only_the_value_changed(before, *after);
    ordered_json expected = document;
    expected[k_key] = value;
    ordered_json read_back = ordered_json::parse(*after);
    EXPECT_EQ(read_back[k_key], value);
    read_back.erase(k_key);
    expected.erase(k_key);
    EXPECT_EQ(read_back, expected);
  }
}

class ScaleInstallTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_seed = test_seed("scale install values");
    m_ckpt = dir() / "ckpt";
    fs::copy(source_dir() / "examples" / "glm5-mini", m_ckpt, fs::copy_options::recursive);
  }

  fs::path write_scales(const std::string& name, const json& scales) {
    write_text(dir() / name, scales.dump(2));
    return dir() / name;
  }

  InstallOptions options(const fs::path& file, InstallForm form, const std::string& sidecar = {}) {
    InstallOptions o;
    o.file = file;
    o.checkpoint_dir = m_ckpt;
    o.form = form;
    o.sidecar_name = sidecar;
    return o;
  }

  ResolvedScales resolve() {
    ResolveOptions o;
    o.checkpoint_dir = m_ckpt;
    auto resolved = resolve_scales(o);
    EXPECT_TRUE(resolved.has_value()) << resolved.error().to_string();
    return resolved.value_or(ResolvedScales{});
  }

  static void expect_scales(const ResolvedScales& resolved, const json& file) {
    ASSERT_EQ(resolved.num_hidden_layers, static_cast<int>(file["scales"].size()));
    for (std::size_t i = 0; i < file["scales"].size(); ++i) {
      EXPECT_EQ(resolved.layers[i].scale, static_cast<float>(file["scales"][i].get<double>())) << i;
      EXPECT_EQ(resolved.layers[i].source, ScaleSource::checkpoint);
    }
    EXPECT_EQ(resolved.layers.back().source, ScaleSource::draft_identity);
  }

  // What must hold after a refusal: config.json's bytes as before, no sidecar.
  void expect_nothing_written(const std::string& config_before, const std::string& sidecar = "new.json") {
    EXPECT_EQ(read_text(m_ckpt / "config.json"), config_before);
    EXPECT_FALSE(fs::exists(fs::symlink_status(m_ckpt / sidecar)));
  }

  std::uint64_t m_seed = 0;
  fs::path m_ckpt;
  // The install's own check resolves the checkpoint's metadata, whatever the environment.
  ScopedEnv m_env{"VLLM_NVFP4_MLA_SCALES_FILE", std::nullopt};
  ScopedEnv m_no_strict{"JITCACHE_STRICT", std::nullopt};
};

TEST_F(ScaleInstallTest, InlineRoundTripKeepsEveryOtherByte) {
  const json scales = valid_scales(m_seed);
  // Written in the documented order, not nlohmann's sorted one: the inline copy keeps it.
  ordered_json ordered;
  for (const char* key : {"format", "num_layers", "latent_dim", "denominator", "scales", "max_abs",
                          "model_revision", "provenance"})
    ordered[key] = scales[key];
  const fs::path file = dir() / "new.json";
  write_text(file, ordered.dump(2));
  const std::string before = read_text(m_ckpt / "config.json");
  InstallOptions o = options(file, InstallForm::inline_object);
  o.replace = ReplaceScales::yes;
  o.checkpoint_revision = "0123456789abcdef0123456789abcdef01234567";
  const auto installed = scales::install_scales(o);
  ASSERT_OK(installed);
  const std::string after = read_text(m_ckpt / "config.json");
  expect_only_the_value_changed(before, after);
  // The inline value is the file's object, in the file's key order.
  const scales::TopLevelMember m = member_of(after, k_key);
  EXPECT_EQ(ordered_json::parse(after.substr(m.value_begin, m.value_end - m.value_begin)),
            ordered_json::parse(read_text(file)));
  EXPECT_TRUE(after.substr(m.value_begin).starts_with("{\n    \"format\": \"nvfp4_ds_mla_outer_scale_v1\",\n"));

  expect_scales(installed->resolved, scales);
  EXPECT_EQ(installed->resolved.provenance.checkpoint_form, CheckpointForm::inline_object);
  EXPECT_EQ(installed->previous_form, CheckpointForm::sidecar);
  EXPECT_EQ(installed->previous_file, "nvfp4_ds_mla_outer_scales.json");
  EXPECT_TRUE(installed->previous_sidecar_left);
  EXPECT_TRUE(fs::exists(m_ckpt / "nvfp4_ds_mla_outer_scales.json")) << "a user's file was deleted";
  EXPECT_EQ(installed->sha256, sha256_hex(read_text(file)));

  const ResolvedScales again = resolve();
  expect_scales(again, scales);
  EXPECT_EQ(again.provenance.sha256, sha256_hex(after));
}

TEST_F(ScaleInstallTest, SidecarRoundTripCopiesTheExactBytes) {
  // Unusual spacing and key order: the copy must be byte-identical, not re-printed.
  const json scales = valid_scales(m_seed);
  const std::string text = "  " + scales.dump(1, '\t') + "\n\n";
  write_text(dir() / "odd.json", text);
  fs::remove(m_ckpt / "nvfp4_ds_mla_outer_scales.json");
  json config = json::parse(read_text(m_ckpt / "config.json"));
  config.erase(k_key);
  write_text(m_ckpt / "config.json", config.dump(2));
  const std::string before = read_text(m_ckpt / "config.json");
  fs::create_directories(m_ckpt / "scales");

  const auto installed = scales::install_scales(options(dir() / "odd.json", InstallForm::sidecar, "scales/v2.json"));
  ASSERT_OK(installed);
  EXPECT_EQ(read_text(m_ckpt / "scales" / "v2.json"), text);
  EXPECT_TRUE(installed->sidecar_written);
  EXPECT_EQ(installed->previous_form, CheckpointForm::none);
  const std::string after = read_text(m_ckpt / "config.json");
  expect_only_the_value_changed(before, after);
  const json reference = json::parse(after)[k_key];
  EXPECT_EQ(reference, json({{"file", "scales/v2.json"}, {"sha256", sha256_hex(text)}}));

  const ResolvedScales resolved = resolve();
  expect_scales(resolved, scales);
  EXPECT_EQ(resolved.provenance.checkpoint_form, CheckpointForm::sidecar);
  EXPECT_EQ(resolved.provenance.file, "scales/v2.json");
  EXPECT_EQ(resolved.provenance.sha256, sha256_hex(text));
}

TEST_F(ScaleInstallTest, ExistingScalesNeedReplace) {
  const fs::path file = write_scales("new.json", valid_scales(m_seed));
  const std::string before = read_text(m_ckpt / "config.json");
  for (const InstallForm form : {InstallForm::inline_object, InstallForm::sidecar}) {
    const auto refused = scales::install_scales(options(file, form, "new.json"));
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
    EXPECT_CONTAINS(refused.error().message, "config.json: field 'nvfp4_ds_mla_outer_scales'");
    EXPECT_CONTAINS(refused.error().message, "sidecar reference to nvfp4_ds_mla_outer_scales.json");
    EXPECT_CONTAINS(refused.error().message, "--replace");
    expect_nothing_written(before);
  }
  // Inline scales are named as such.
  InstallOptions o = options(file, InstallForm::inline_object);
  o.replace = ReplaceScales::yes;
  ASSERT_OK(scales::install_scales(o));
  const std::string inline_text = read_text(m_ckpt / "config.json");
  const auto refused = scales::install_scales(options(file, InstallForm::sidecar, "new.json"));
  ASSERT_FALSE(refused.has_value());
  EXPECT_CONTAINS(refused.error().message, "an inline object");
  EXPECT_EQ(read_text(m_ckpt / "config.json"), inline_text);

  // A sidecar under an existing file's name is overwritten with --replace; there is no
  // other old sidecar to leave behind.
  o = options(file, InstallForm::sidecar, "nvfp4_ds_mla_outer_scales.json");
  o.replace = ReplaceScales::yes;
  const auto replaced = scales::install_scales(o);
  ASSERT_OK(replaced);
  EXPECT_EQ(replaced->previous_form, CheckpointForm::inline_object);
  EXPECT_FALSE(replaced->previous_sidecar_left);
  EXPECT_EQ(read_text(m_ckpt / "nvfp4_ds_mla_outer_scales.json"), read_text(file));
}

TEST_F(ScaleInstallTest, CountsThatDisagreeAreRefusedNamingBothFiles) {
  const std::string before = read_text(m_ckpt / "config.json");
  const fs::path layers = write_scales("layers.json", valid_scales(m_seed, 77));
  InstallOptions o = options(layers, InstallForm::sidecar, "new.json");
  o.replace = ReplaceScales::yes;
  auto refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(refused.error().message, layers.string() + ": field 'num_layers': is 77");
  EXPECT_CONTAINS(refused.error().message, (m_ckpt / "config.json").string() +
                                               " has field 'num_hidden_layers' 78 and field 'kv_lora_rank' 512");
  expect_nothing_written(before);

  json wide = valid_scales(m_seed);
  wide["latent_dim"] = 256;
  o.file = write_scales("wide.json", wide);
  refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_CONTAINS(refused.error().message, "field 'latent_dim': is 256");
  EXPECT_CONTAINS(refused.error().message, "field 'kv_lora_rank' 512");
  expect_nothing_written(before);
}

TEST_F(ScaleInstallTest, InvalidFileIsRefusedWithNothingWritten) {
  const std::string before = read_text(m_ckpt / "config.json");
  json bad = valid_scales(m_seed);
  bad["scales"][5] = -1.0;
  InstallOptions o = options(write_scales("bad.json", bad), InstallForm::sidecar, "new.json");
  o.replace = ReplaceScales::yes;
  auto refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_CONTAINS(refused.error().message, "field 'scales[5]': must be > 0");
  expect_nothing_written(before);

  write_text(dir() / "dup.json", R"({"format": "nvfp4_ds_mla_outer_scale_v1", "format": "x"})");
  o.file = dir() / "dup.json";
  refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_CONTAINS(refused.error().message, "duplicate");
  expect_nothing_written(before);

  o.file = dir() / "missing.json";
  refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::not_found);
  expect_nothing_written(before);
}

TEST_F(ScaleInstallTest, RevisionMustMatchTheSnapshot) {
  // A Hugging Face cache layout: the revision is the snapshot directory's name.
  const std::string revision = "fedcba9876543210fedcba9876543210fedcba98";
  const fs::path snapshot = dir() / "hub" / "models--org--glm" / "snapshots" / revision;
  fs::create_directories(snapshot.parent_path());
  fs::rename(m_ckpt, snapshot);
  m_ckpt = snapshot;
  const std::string before = read_text(m_ckpt / "config.json");

  json scales = valid_scales(m_seed);  // model_revision 0123...
  InstallOptions o = options(write_scales("other.json", scales), InstallForm::inline_object);
  o.replace = ReplaceScales::yes;
  auto refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(refused.error().message, "field 'model_revision'");
  EXPECT_CONTAINS(refused.error().message, revision);
  EXPECT_CONTAINS(refused.error().message, "snapshots/<revision>");
  EXPECT_EQ(read_text(m_ckpt / "config.json"), before);

  // An explicit revision is checked the same way.
  o.checkpoint_revision = "0123456";
  ASSERT_OK(scales::install_scales(o));  // an abbreviation of the file's revision
  write_text(m_ckpt / "config.json", before);
  o.checkpoint_revision = "abcdef0";
  refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_CONTAINS(refused.error().message, "\"abcdef0\" (given explicitly)");
  EXPECT_EQ(read_text(m_ckpt / "config.json"), before);

  o.checkpoint_revision.reset();
  scales["model_revision"] = revision.substr(0, 12);  // an abbreviation matches
  o.file = write_scales("same.json", scales);
  const auto installed = scales::install_scales(o);
  ASSERT_OK(installed);
  EXPECT_EQ(installed->resolved.provenance.checkpoint_revision, revision);
  expect_scales(resolve(), scales);
}

TEST_F(ScaleInstallTest, SidecarNamesThatLeaveTheCheckpointAreRefused) {
  const std::string before = read_text(m_ckpt / "config.json");
  const fs::path file = write_scales("new.json", valid_scales(m_seed));
  fs::create_directories(dir() / "outside");
  fs::create_directory_symlink(dir() / "outside", m_ckpt / "out");
  write_text(dir() / "outside" / "target.json", "{}");
  fs::create_symlink(dir() / "outside" / "target.json", m_ckpt / "link.json");
  fs::create_symlink(dir() / "outside" / "dangling.json", m_ckpt / "dangling.json");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"../x.json", "leaves the checkpoint directory"},
      {"a/../../x.json", "leaves the checkpoint directory"},
      {(dir() / "abs.json").string(), "absolute path"},
      {"out/x.json", "outside the checkpoint directory"},
      {"link.json", "outside the checkpoint directory"},
      {"dangling.json", "a symbolic link"},
      {"config.json", "the same file as the input '" + (m_ckpt / "config.json").string() + "'"},
      {"missing/x.json", "cannot be opened"},
      {"sub/", "names a directory"},
  };
  for (const auto& [name, why] : cases) {
    InstallOptions o = options(file, InstallForm::sidecar, name);
    o.replace = ReplaceScales::yes;
    const auto refused = scales::install_scales(o);
    ASSERT_FALSE(refused.has_value()) << name;
    EXPECT_CONTAINS(refused.error().message, why);
    EXPECT_CONTAINS(refused.error().message, "nvfp4_ds_mla_outer_scales.file");
    EXPECT_EQ(read_text(m_ckpt / "config.json"), before) << name;
  }
  EXPECT_EQ(read_text(dir() / "outside" / "target.json"), "{}");
  EXPECT_FALSE(fs::exists(dir() / "x.json"));
  EXPECT_FALSE(fs::exists(dir() / "abs.json"));
  EXPECT_FALSE(fs::exists(dir() / "outside" / "x.json"));
  EXPECT_FALSE(fs::exists(dir() / "outside" / "dangling.json"));
}

TEST_F(ScaleInstallTest, ExistingSidecarNameNeedsReplaceUnlessTheBytesAreEqual) {
  const fs::path file = write_scales("new.json", valid_scales(m_seed));
  json config = json::parse(read_text(m_ckpt / "config.json"));
  config.erase(k_key);  // no scales yet: the name is the only question
  write_text(m_ckpt / "config.json", config.dump(2));
  const std::string plain = read_text(m_ckpt / "config.json");
  write_text(m_ckpt / "taken.json", "someone else's file");

  InstallOptions o = options(file, InstallForm::sidecar, "taken.json");
  auto refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(refused.error().message, "taken.json: already exists with other content");
  EXPECT_EQ(read_text(m_ckpt / "taken.json"), "someone else's file");
  EXPECT_EQ(read_text(m_ckpt / "config.json"), plain);

  o.replace = ReplaceScales::yes;
  auto installed = scales::install_scales(o);
  ASSERT_OK(installed);
  EXPECT_TRUE(installed->sidecar_written);
  EXPECT_EQ(read_text(m_ckpt / "taken.json"), read_text(file));

  // The same bytes already there (the user copied the file in first): nothing to write.
  write_text(m_ckpt / "config.json", plain);
  fs::copy_file(file, m_ckpt / "copied.json");
  installed = scales::install_scales(options(file, InstallForm::sidecar, "copied.json"));
  ASSERT_OK(installed);
  EXPECT_FALSE(installed->sidecar_written);
  EXPECT_EQ(installed->resolved.provenance.file, "copied.json");
}

TEST_F(ScaleInstallTest, KeepsTheModeAndRefusesASymlinkedConfig) {
  const fs::path file = write_scales("new.json", valid_scales(m_seed));
  fs::permissions(m_ckpt / "config.json", fs::perms(0640));
  InstallOptions o = options(file, InstallForm::sidecar, "new.json");
  o.replace = ReplaceScales::yes;
  ASSERT_OK(scales::install_scales(o));
  struct stat st {};
  ASSERT_EQ(::stat((m_ckpt / "config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  ASSERT_EQ(::stat((m_ckpt / "new.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u) << "the sidecar is readable by whoever reads config.json";

  // A Hugging Face snapshot's config.json is a link into blobs/: never written through.
  fs::rename(m_ckpt / "config.json", dir() / "blob");
  fs::create_symlink(dir() / "blob", m_ckpt / "config.json");
  const std::string blob = read_text(dir() / "blob");
  o.sidecar_name = "other.json";
  const auto refused = scales::install_scales(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::unsafe);
  EXPECT_CONTAINS(refused.error().message, "config.json is a symbolic link");
  EXPECT_EQ(read_text(dir() / "blob"), blob);
  EXPECT_FALSE(fs::exists(m_ckpt / "other.json"));
}

TEST_F(ScaleInstallTest, AnOverrideInTheEnvironmentDoesNotHideWhatWasInstalled) {
  json other = valid_scales(m_seed + 1);
  const fs::path override_file = write_scales("override.json", other);
  ScopedEnv env("VLLM_NVFP4_MLA_SCALES_FILE", override_file.string());
  const json scales = valid_scales(m_seed);
  InstallOptions o = options(write_scales("new.json", scales), InstallForm::inline_object);
  o.replace = ReplaceScales::yes;
  const auto installed = scales::install_scales(o);
  ASSERT_OK(installed);
  expect_scales(installed->resolved, scales);
}

TEST_F(ScaleInstallTest, CompactConfigWithEscapedKeysKeepsItsBytes) {
  json config = glm_config();
  config["we\"ird \\ key"] = "a \"quoted\" {value}";
  const std::string before = config.dump() + "\n";  // one line; the odd key sorts first
  fs::remove_all(m_ckpt);
  write_text(m_ckpt / "config.json", before);
  const json scales = valid_scales(m_seed);
  const auto installed =
      scales::install_scales(options(write_scales("new.json", scales), InstallForm::inline_object));
  ASSERT_OK(installed);
  const std::string after = read_text(m_ckpt / "config.json");
  expect_only_the_value_changed(before, after);
  EXPECT_EQ(std::count(after.begin(), after.end(), '\n'), 1);
  expect_scales(resolve(), scales);
}

}  // namespace
}  // namespace jitcache
