// Index::insert_new (cache/index.hpp): the create-only insert behind DiskTier::create.
#include "cache/index.hpp"

namespace jitcache::cache {

Result<bool> Index::insert_new(const NewEntry& entry, const std::function<void()>& before_commit) {
  const std::string key = entry.key.to_hex();
  JC_TRY(writable("insert entry " + key));
  std::lock_guard lock(m_mutex);
  // BEGIN IMMEDIATE holds the write lock from here to the commit: no other connection can
  // insert the key between the check and the insert.
  auto txn = JC_TRY(sql::Transaction::begin(m_db));
  auto present = JC_TRY(m_db.prepare("SELECT 1 FROM entries WHERE key = ?1", "preparing create"));
  JC_TRY(present.bind(key));
  if (JC_TRY(present.step("looking up " + key)) == sql::Step::row) return false;  // rolled back: nothing changed
  present.reset();
  auto stmt = JC_TRY(m_db.prepare("INSERT INTO entries (key, key_schema, digest, size, facts, created, last_used, "
                                  "hits, compile_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, 0, ?7)",
                                  "preparing create"));
  JC_TRY(stmt.bind(key, static_cast<std::int64_t>(k_key_schema_version), entry.digest.to_hex(),
                   static_cast<std::int64_t>(entry.size), entry.facts_json, entry.now_ms, entry.compile_ms));
  JC_TRY(stmt.run("creating entry " + key));
  if (before_commit) before_commit();
  JC_TRY(txn.commit());
  return true;
}

}  // namespace jitcache::cache
