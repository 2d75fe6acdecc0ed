#include "runtime/compile/cache_archive.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "cache/entry.hpp"
#include "jitcache/log.hpp"
#include "kernel_templates/generator.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/fingerprint_memo.hpp"
#include "runtime/compile/manifest_fields.hpp"
#include "runtime/compile/source_cache.hpp"
#include "support/atomic_file.hpp"
#include "support/enum_names.hpp"
#include "support/hmac.hpp"
#include "support/little_endian.hpp"
#include "support/regular_file.hpp"

namespace jitcache {
namespace {

constexpr std::string_view k_magic = "JCEXPORT";
constexpr std::string_view k_end_magic = "JCEXPEND";
// Differs from remote values' "jitcache.remote.v1\0": a MAC of one kind never verifies as the other.
constexpr std::string_view k_domain{"jitcache.export.v1\0", 19};
constexpr std::size_t k_checksum_offset_in_trailer = 16;
constexpr std::size_t k_mac_offset_in_trailer = 32;

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string checksum_of(std::string_view bytes) {
  const auto digest = cache::BlobDigest::of(bytes).bytes();
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

Sha256Digest mac_of(std::string_view key, std::string_view signed_bytes) {
  return hmac_sha256(key, {k_domain, signed_bytes});
}

std::string offset_text(std::uint64_t offset) { return "offset " + std::to_string(offset); }

// Every refusal names the file first, then where in it.
class Refusal {
 public:
  explicit Refusal(std::string_view name) : m_name(name) {}
  std::unexpected<Error> operator()(const std::string& what) const {
    return make_error(ErrorCode::invalid_input, m_name + ": " + what + "; nothing was imported");
  }

 private:
  std::string m_name;
};

nlohmann::ordered_json manifest_json(const ArchiveInfo& info, std::span<const ExportEntry> entries) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ExportEntry& e : entries) list.push_back(manifest_entry_json(e, WithSha256::no));
  return {{"format", std::string(k_archive_format)},   {"producer", info.producer}, {"created", info.created},
          {"checkpoint", info.checkpoint}, {"rope", info.rope},         {"targets", info.targets},
          {"entries", list}};
}

Status check_entry_blob(const ArchiveItem& item, std::span<const std::byte> blob, const std::string& where,
                        const Refusal& refuse) {
  const cache::BlobDigest digest = cache::BlobDigest::of(blob);
  if (digest != item.digest)
    return refuse(where + ": digest mismatch: the blob at " + offset_text(item.offset) + " hashes to " +
                  digest.to_hex() + ", the manifest says " + item.digest.to_hex());
  if (auto checked = check_stored_content(item.facts, blob); !checked)
    return refuse(where + ": the bundle does not match its key: " + checked.error().message);
  return {};
}

}  // namespace

const char* to_string(ArchiveSignature signature) {
  return enum_name(signature, {"verified", "unsigned", "unchecked"});
}

Result<std::vector<ExportEntry>> gather_export_entries(KernelCache& kernels, const Compiler& compiler,
                                                       std::span<const KernelSpec> specs, unsigned jobs,
                                                       const std::function<void(const GatherProgress&)>& progress) {
  std::vector<ExportEntry> entries(specs.size());
  std::mutex progress_mutex;
  std::size_t done = 0;
  auto record = [&](std::size_t i, const KernelFetch& fetched, std::chrono::steady_clock::time_point started)
      -> Status {
    ExportEntry& e = entries[i];
    e.label = specs[i].label();
    e.key = fetched.key;
    // The facts the kernel cache keyed the entry under, derived the same way again.
    e.facts = JC_TRY(kernel_facts(generate(specs[i]), compiler));
    if (e.facts.key() != e.key)
      return make_error(ErrorCode::internal, "export: the facts of " + e.label + " do not hash to its key");
    if (!fetched.bytes)
      return make_error(ErrorCode::internal, "export: the kernel cache returned no bundle for " + e.label);
    e.bytes = fetched.bytes;
    e.compile_ms = fetched.artifact->compile_ms;
    e.compiled_now = fetched.source == cache::Source::produced;
    if (progress) {
      std::lock_guard lock(progress_mutex);
      progress(GatherProgress{++done, specs.size(), e.label, e.compiled_now, ms_since(started)});
    }
    return {};
  };

  JC_TRY(fetch_each(kernels, specs, jobs, BundleText::skip, record));
  return entries;
}

std::string encode_archive_body(std::string_view manifest_json, std::span<const std::string_view> blobs) {
  std::size_t total = k_archive_header_bytes + manifest_json.size();
  for (std::string_view b : blobs) total += b.size();
  std::string body;
  body.reserve(total + k_archive_trailer_bytes);
  body.append(k_magic);
  append_le(body, k_archive_version);
  append_le(body, std::uint32_t{0});
  append_le(body, static_cast<std::uint64_t>(manifest_json.size()));
  body.append(manifest_json);
  for (std::string_view b : blobs) body.append(b);
  return body;
}

std::string encode_archive_body(const ArchiveInfo& info, std::span<const ExportEntry> entries) {
  std::vector<std::string_view> blobs;
  for (const ExportEntry& e : entries)
    blobs.emplace_back(reinterpret_cast<const char*>(e.bytes->data()), e.bytes->size());
  return encode_archive_body(manifest_json(info, entries).dump(), blobs);
}

std::string seal_archive(std::string body, const std::optional<std::string>& fleet_key) {
  body.append(k_end_magic);
  append_le(body, std::uint32_t{fleet_key ? 1u : 0u});
  append_le(body, std::uint32_t{0});
  body.append(checksum_of(body));
  if (fleet_key) {
    const Sha256Digest mac = mac_of(*fleet_key, body);
    body.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  } else {
    body.append(k_hmac_bytes, '\0');
  }
  return body;
}

Result<std::uint64_t> write_archive(const std::filesystem::path& path, const ArchiveInfo& info,
                                    std::span<const ExportEntry> entries,
                                    const std::optional<std::string>& fleet_key) {
  const std::string data = seal_archive(encode_archive_body(info, entries), fleet_key);
  AtomicFileWriter writer = JC_TRY(AtomicFileWriter::create(path));
  JC_TRY(writer.write(data));
  JC_TRY(writer.commit());
  return data.size();
}

Result<VerifiedArchive> verify_archive(std::string data, std::string_view name,
                                       const std::optional<std::string>& fleet_key) {
  const Refusal refuse(name);
  const std::uint64_t size = data.size();
  const std::string_view view = data;

  // The frame: header, manifest length, trailer; nothing inside is read yet.
  if (size < k_magic.size() && k_magic.starts_with(view))
    return refuse("truncated: " + std::to_string(size) + " bytes, not even the magic at offset 0");
  if (view.substr(0, k_magic.size()) != k_magic)
    return refuse("offset 0: not a jitcache export file (magic is not \"JCEXPORT\")");
  if (size < k_archive_header_bytes)
    return refuse("truncated: " + std::to_string(size) + " bytes, the header needs " +
                  std::to_string(k_archive_header_bytes));
  const auto version = read_le<std::uint32_t>(view, 8);
  if (version != k_archive_version)
    return refuse("offset 8: unknown format version " + std::to_string(version) + " (this build reads version " +
                  std::to_string(k_archive_version) + ")");
  if (const auto flags = read_le<std::uint32_t>(view, 12); flags != 0)
    return refuse("offset 12: unknown flags " + std::to_string(flags));
  const auto manifest_len = read_le<std::uint64_t>(view, 16);
  if (manifest_len > k_max_manifest_bytes)
    return refuse("offset 16: manifest length " + std::to_string(manifest_len) + " exceeds the limit of " +
                  std::to_string(k_max_manifest_bytes) + " bytes");
  const std::uint64_t framed = k_archive_header_bytes + manifest_len + k_archive_trailer_bytes;
  if (size < framed)
    return refuse("truncated: " + std::to_string(size) + " bytes, but the header's manifest length (" +
                  std::to_string(manifest_len) + ") and the trailer need at least " + std::to_string(framed));
  const std::uint64_t trailer = size - k_archive_trailer_bytes;
  if (view.substr(trailer, k_end_magic.size()) != k_end_magic)
    return refuse(offset_text(trailer) + ": no trailer (\"JCEXPEND\") where the file's last " +
                  std::to_string(k_archive_trailer_bytes) + " bytes begin: truncated, or bytes appended");
  const auto signed_flag = read_le<std::uint32_t>(view, trailer + 8);
  if (signed_flag > 1) return refuse(offset_text(trailer + 8) + ": signed flag " + std::to_string(signed_flag) + " is not 0 or 1");
  if (read_le<std::uint32_t>(view, trailer + 12) != 0) return refuse(offset_text(trailer + 12) + ": reserved field is not 0");

  // Damage anywhere, then authenticity, before any byte inside is interpreted.
  const std::uint64_t checksum_at = trailer + k_checksum_offset_in_trailer;
  const std::uint64_t mac_at = trailer + k_mac_offset_in_trailer;
  if (checksum_of(view.substr(0, checksum_at)) != view.substr(checksum_at, cache::k_hash_bytes))
    return refuse(offset_text(checksum_at) + ": checksum mismatch: bytes [0, " + std::to_string(checksum_at) +
                  ") were altered or damaged");
  const std::string_view mac = view.substr(mac_at, k_hmac_bytes);
  VerifiedArchive archive;
  archive.version = version;
  if (signed_flag == 0) {
    if (mac.find_first_not_of('\0') != std::string_view::npos)
      return refuse(offset_text(mac_at) + ": an unsigned file must have a zero signature field");
    if (fleet_key)
      return refuse("the file is not signed, but a fleet key is configured (JITCACHE_REMOTE_KEY_FILE): only "
                    "signed files are imported where a key is configured");
    archive.signature = ArchiveSignature::absent;
  } else if (fleet_key) {
    if (!same_mac(mac_of(*fleet_key, view.substr(0, mac_at)), mac))
      return refuse(offset_text(mac_at) + ": bad signature: not signed with this fleet key, or altered after signing");
    archive.signature = ArchiveSignature::verified;
  } else {
    archive.signature = ArchiveSignature::unchecked;
  }

  // The manifest.
  const std::string manifest_text(view.substr(k_archive_header_bytes, manifest_len));
  const nlohmann::json manifest = nlohmann::json::parse(manifest_text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object())
    return refuse("manifest at offset 24: not a JSON object");
  const ManifestFields read{manifest, "manifest: ", refuse};
  const std::string format = JC_TRY(read.string("format"));
  if (format != k_archive_format) return refuse("manifest: format: \"" + format + "\" is not \"jitcache-export\"");
  archive.info.producer = JC_TRY(read.string("producer"));
  archive.info.created = JC_TRY(read.string("created"));
  archive.info.checkpoint = JC_TRY(read.string("checkpoint"));
  archive.info.rope = JC_TRY(read.string("rope"));
  archive.info.targets = JC_TRY(read.strings("targets"));
  const nlohmann::json* entries = JC_TRY(read.array("entries", k_max_archive_entries));

  // The entries, each laid out after the one before; their sizes must fill the blobs
  // section exactly, so a size that lies is caught before any blob is read.
  const std::uint64_t blobs_begin = k_archive_header_bytes + manifest_len;
  const std::uint64_t blobs_end = trailer;
  std::uint64_t offset = blobs_begin;
  std::set<cache::CacheKey> seen;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    const nlohmann::json& e = (*entries)[i];
    std::string where = "entry " + std::to_string(i);
    if (!e.is_object()) return refuse("manifest: " + where + ": not an object");
    const auto field = [&](const char* name) {
      return ManifestFields{e, "manifest: " + where + ": ", refuse}.string(name);
    };
    ArchiveItem item;
    const std::string key_hex = JC_TRY(field("key"));
    auto key = cache::CacheKey::from_hex(key_hex);
    if (!key) return refuse("manifest: " + where + ": key: " + key.error().message);
    item.key = *key;
    where += " (key " + key_hex + ")";
    item.label = JC_TRY(field("label"));
    const auto facts = e.find("facts");
    if (facts == e.end() || !facts->is_object()) return refuse("manifest: " + where + ": facts: missing or not an object");
    auto parsed = cache::Facts::from_json(facts->dump());
    if (!parsed) return refuse("manifest: " + where + ": facts: " + parsed.error().message);
    item.facts = std::move(*parsed);
    if (item.facts.key() != item.key)
      return refuse("manifest: " + where + ": facts: they hash to key " + item.facts.key().to_hex() +
                    ", not to the entry's key");
    if (!seen.insert(item.key).second) return refuse("manifest: " + where + ": key: listed twice");
    const std::string digest_hex = JC_TRY(field("digest"));
    auto digest = cache::BlobDigest::from_hex(digest_hex);
    if (!digest) return refuse("manifest: " + where + ": digest: " + digest.error().message);
    item.digest = *digest;
    const auto entry_size = e.find("size");
    if (entry_size == e.end() || !entry_size->is_number_unsigned())
      return refuse("manifest: " + where + ": size: missing or not a non-negative integer");
    item.size = entry_size->get<std::uint64_t>();
    if (item.size > blobs_end - offset)
      return refuse("manifest: " + where + ": size: " + std::to_string(item.size) + " bytes from " +
                    offset_text(offset) + " run past the end of the blobs at " + offset_text(blobs_end));
    item.offset = offset;
    offset += item.size;
    const auto compile_ms = e.find("compile_ms");
    if (compile_ms == e.end() || !compile_ms->is_number())
      return refuse("manifest: " + where + ": compile_ms: missing or not a number");
    item.compile_ms = compile_ms->get<double>();
    // The rules the index holds its rows to (verify's): a value it would refuse or call
    // damaged refuses the file.
    if (auto fields = cache::check_incoming_fields({item.size, item.compile_ms, {}}); !fields)
      return refuse("manifest: " + where + ": " + fields.error().message);
    archive.items.push_back(std::move(item));
  }
  if (offset != blobs_end)
    return refuse(offset_text(offset) + ": " + std::to_string(blobs_end - offset) +
                  " bytes before the trailer belong to no entry of the manifest");

  // Each blob against its digest and its key's facts.
  const auto bytes = std::as_bytes(std::span(data));
  for (std::size_t i = 0; i < archive.items.size(); ++i) {
    const ArchiveItem& item = archive.items[i];
    JC_TRY(check_entry_blob(item, bytes.subspan(item.offset, item.size),
                            "entry " + std::to_string(i) + " (" + item.label + ", key " + item.key.to_hex() + ")",
                            refuse));
  }
  archive.data = std::move(data);
  return archive;
}

Result<VerifiedArchive> read_archive(const std::filesystem::path& path, const std::optional<std::string>& fleet_key) {
  const RegularFile file = JC_TRY(RegularFile::open(path));
  if (file.size() > k_max_archive_bytes)
    return make_error(ErrorCode::invalid_input, path.string() + ": " + std::to_string(file.size()) +
                                                    " bytes exceed the export file limit of " +
                                                    std::to_string(k_max_archive_bytes) + "; nothing was imported");
  std::string data = JC_TRY(file.read_all(k_max_archive_bytes));
  return verify_archive(std::move(data), path.string(), fleet_key);
}

namespace {
constexpr std::string_view k_fingerprint_fact = "compiler_fingerprint";
}  // namespace

std::vector<const ArchiveItem*> keyed_for_other_build(const VerifiedArchive& archive, std::string_view fingerprint) {
  std::vector<const ArchiveItem*> other;
  for (const ArchiveItem& item : archive.items)
    if (const auto theirs = item.facts.get(k_fingerprint_fact); theirs && *theirs != fingerprint)
      other.push_back(&item);
  return other;
}

std::vector<std::string> other_build_fingerprints(std::span<const ArchiveItem* const> items) {
  std::vector<std::string> fingerprints;
  for (const ArchiveItem* item : items) {
    const std::string theirs(item->facts.get(k_fingerprint_fact).value_or(""));
    if (std::find(fingerprints.begin(), fingerprints.end(), theirs) == fingerprints.end())
      fingerprints.push_back(theirs);
  }
  return fingerprints;
}

namespace {

// The compiler builds the archive's entries were keyed with, into the cache's memo: a node
// with no compiler (the air-gapped image an export is for) keys its lookups with the build
// most of them name, and the audit knows each. A memo that cannot be written leaves the
// entries imported, and is said.
void record_imported_builds(const std::filesystem::path& memo, const VerifiedArchive& archive) {
  std::map<std::pair<std::string, std::string>, std::pair<MemoValue, std::size_t>> counted;  // (tool, fp)
  for (const ArchiveItem& item : archive.items)
    for (const ImportedBuild& build : compiler_builds_of(item.facts)) {
      auto& [value, count] = counted[{build.tool, build.value.fingerprint}];
      value = build.value;
      ++count;
    }
  if (counted.empty()) return;
  std::vector<ImportedBuild> builds;
  std::map<std::string, std::pair<MemoValue, std::size_t>> most;  // tool -> its most named build
  for (const auto& [tool_fp, counted_value] : counted) {
    builds.push_back({tool_fp.first, counted_value.first});
    auto& best = most[tool_fp.first];
    if (counted_value.second > best.second) best = counted_value;
  }
  std::vector<ImportedBuild> last;
  for (const auto& [tool, best] : most) last.push_back({tool, best.first});
  if (auto written = write_imported_builds(memo, builds, last); !written)
    log_warning("the compiler builds of the imported entries were not recorded in " + memo.string() + " (" +
                written.error().message + "): a node without a compiler cannot key lookups for them");
}

}  // namespace

Result<ImportReport> import_archive(cache::Store& store, const VerifiedArchive& archive) {
  if (store.mode() != cache::StoreMode::read_write)
    return make_error(ErrorCode::unavailable,
                      "cannot import into " + store.root().string() + ": the cache is " +
                          (store.mode() == cache::StoreMode::read_only ? "read-only (" + store.mode_reason() + ")"
                                                                       : std::string("memory-only")));
  ImportReport report;
  for (const ArchiveItem& item : archive.items) {
    if (JC_TRY(store.contains(item.key))) {
      report.present.push_back(&item);
      continue;
    }
    JC_TRY(store.put(item.key, item.facts, archive.blob(item), item.compile_ms));
    report.added.push_back(&item);
  }
  record_imported_builds(store.root() / k_fingerprint_memo_name, archive);
  return report;
}

}  // namespace jitcache
