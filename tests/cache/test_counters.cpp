// The counter table (JC_CACHE_COUNTERS in cache/entry.hpp) and everything derived from it.
// The round trips iterate k_counter_fields, so a counter added there is tested here without
// a line added by hand; the golden JSON and text pin today's public forms.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "cache/entry.hpp"
#include "cache/index.hpp"
#include "cache/report.hpp"
#include "cache_test_support.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;
using namespace std::chrono_literals;

// A different value per counter; milliseconds with a fraction.
Counters distinct_counters(std::uint64_t seed) {
  Counters counters;
  std::uint64_t n = seed;
  for (const CounterField& field : k_counter_fields) {
    ++n;
    switch (field.kind) {
      case CounterKind::count: counters.*field.count = 1000 * n + 7; break;
      case CounterKind::milliseconds:
        counters.*field.milliseconds = 250.0 * static_cast<double>(n) + 0.5;
        break;
    }
  }
  return counters;
}

TEST(CounterTableTest, NamesAreUniqueAndEveryFieldIsComplete) {
  std::set<std::string_view> names, json;
  for (const CounterField& field : k_counter_fields) {
    SCOPED_TRACE(field.name);
    EXPECT_TRUE(names.insert(field.name).second);
    EXPECT_TRUE(json.insert(field.json).second);
    EXPECT_NE(field.name, "entries") << "a name the index keeps for its own totals";
    EXPECT_NE(field.name, "bytes");
    EXPECT_EQ((field.count != nullptr) + (field.milliseconds != nullptr), 1);
    EXPECT_EQ(field.count != nullptr, field.kind == CounterKind::count);
    EXPECT_NE(field.text_part.find("{}"), std::string_view::npos);
    EXPECT_FALSE(field.text_row.empty());
    EXPECT_FALSE(field.description.empty());
  }
  EXPECT_EQ(sizeof(Counters), k_counter_fields.size() * 8) << "a member outside the table";
}

TEST(CounterTableTest, PlusEqualsAndEqualityCoverEveryCounter) {
  const Counters a = distinct_counters(1), b = distinct_counters(50);
  Counters sum = a;
  sum += b;
  for (const CounterField& field : k_counter_fields) {
    SCOPED_TRACE(field.name);
    EXPECT_DOUBLE_EQ(counter_value(field, sum), counter_value(field, a) + counter_value(field, b));
    Counters changed = a;
    switch (field.kind) {
      case CounterKind::count: changed.*field.count += 1; break;
      case CounterKind::milliseconds: changed.*field.milliseconds += 0.25; break;
    }
    EXPECT_FALSE(changed == a);
  }
  EXPECT_EQ(a, distinct_counters(1));
}

class CounterIndexTest : public StoreFixture {
 protected:
  std::filesystem::path db() const { return root() / "index.db"; }
  std::unique_ptr<Index> open_index(IndexAccess access = IndexAccess::read_write) {
    std::filesystem::create_directories(root());
    IndexOptions options;
    options.busy_timeout = 2s;
    options.durability = Durability::relaxed;
    options.access = access;
    auto index = Index::open(db(), options);
    EXPECT_TRUE(index.has_value()) << index.error().error.to_string();
    return index ? std::move(*index) : nullptr;
  }
};

TEST_F(CounterIndexTest, EveryCounterRoundTripsThroughTheIndex) {
  const Counters delta = distinct_counters(jitcache::testing::test_seed("counters") % 1000);
  {
    auto index = open_index();
    ASSERT_TRUE(index);
    ASSERT_OK(index->record_usage({}, delta));
    ASSERT_OK(index->record_usage({}, delta));
  }
  auto index = open_index();
  ASSERT_TRUE(index);
  auto read = index->counters();
  ASSERT_OK(read);
  Counters twice = delta;
  twice += delta;
  for (const CounterField& field : k_counter_fields)
    EXPECT_DOUBLE_EQ(counter_value(field, *read), counter_value(field, twice)) << field.name;
  EXPECT_EQ(*read, twice);
  auto problems = index->check_values();
  ASSERT_OK(problems);
  EXPECT_TRUE(problems->empty()) << (*problems)[0];
}

// The rows of a fresh index come from the table: its counters, with a value of the
// counter's kind, and the trigger-kept totals.
TEST_F(CounterIndexTest, FreshIndexHoldsARowPerCounterOfItsKind) {
  ASSERT_TRUE(open_index());
  std::vector<std::string> expected = {"bytes integer", "entries integer"};
  for (const CounterField& field : k_counter_fields)
    expected.push_back(std::string(field.name) + (field.kind == CounterKind::count ? " integer" : " real"));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(sql_query(db(), "SELECT name || ' ' || typeof(value) FROM counters ORDER BY name"), expected);
}

// An index written before a counter existed: no row, and a user_version that does not
// match. It reads as 0, read-only verify does not complain, and the next writer adds the
// row so the counter is kept from then on.
TEST_F(CounterIndexTest, IndexOlderThanACounterReadsZeroAndGainsTheRow) {
  for (const CounterField& field : k_counter_fields) {
    SCOPED_TRACE(field.name);
    std::filesystem::remove_all(root());
    ASSERT_TRUE(open_index());
    ASSERT_TRUE(sql_query(db(), "DELETE FROM counters WHERE name = '" + std::string(field.name) +
                                    "'; PRAGMA user_version = 0")
                    .empty());
    {
      auto index = open_index(IndexAccess::read_only);
      ASSERT_TRUE(index);
      auto read = index->counters();
      ASSERT_OK(read);
      EXPECT_EQ(counter_value(field, *read), 0.0);
      auto problems = index->check_values();
      ASSERT_OK(problems);
      EXPECT_TRUE(problems->empty()) << (*problems)[0];
    }
    const Counters delta = distinct_counters(3);
    {
      auto index = open_index();
      ASSERT_TRUE(index);
      ASSERT_OK(index->record_usage({}, delta));
      auto problems = index->check_values();
      ASSERT_OK(problems);
      EXPECT_TRUE(problems->empty()) << (*problems)[0];
    }
    auto index = open_index();
    auto read = index->counters();
    ASSERT_OK(read);
    EXPECT_EQ(*read, delta) << "the counter that had no row was kept too";
  }
}

// A current index writes nothing when opened: the counter rows are added once.
TEST_F(CounterIndexTest, CurrentIndexOpensWithoutWriting) {
  ASSERT_TRUE(open_index());
  const auto layout = sql_query(db(), "PRAGMA user_version");
  ASSERT_EQ(layout.size(), 1u);
  EXPECT_NE(layout[0], "0");
  const std::string before = read_file(db());
  ASSERT_TRUE(open_index());
  EXPECT_EQ(read_file(db()), before);
  EXPECT_EQ(sql_query(db(), "PRAGMA user_version"), layout);
}

TEST(CounterReportTest, EveryCounterRoundTripsThroughJsonAndText) {
  Stats stats;
  stats.totals = distinct_counters(jitcache::testing::test_seed("counter report") % 1000);
  const nlohmann::ordered_json doc = to_json(stats);
  const auto rows = counter_text_rows(stats.totals);
  for (const CounterField& field : k_counter_fields) {
    SCOPED_TRACE(field.name);
    const auto pointer = nlohmann::ordered_json::json_pointer("/" + std::string(field.json));
    ASSERT_TRUE(doc.contains(pointer)) << doc.dump();
    const double value = counter_value(field, stats.totals);
    std::string shown;
    switch (field.kind) {
      case CounterKind::count:
        EXPECT_TRUE(doc.at(pointer).is_number_unsigned());
        EXPECT_EQ(doc.at(pointer).get<std::uint64_t>(), stats.totals.*field.count);
        shown = std::to_string(stats.totals.*field.count);
        break;
      case CounterKind::milliseconds: {
        EXPECT_TRUE(doc.at(pointer).is_number_float());
        EXPECT_DOUBLE_EQ(doc.at(pointer).get<double>(), value);
        char seconds[64];
        std::snprintf(seconds, sizeof seconds, "%.1f", value / 1000);
        shown = seconds;
        break;
      }
    }
    std::string part(field.text_part);
    part.replace(part.find("{}"), 2, shown);
    bool found = false;
    for (const auto& [label, text] : rows)
      if (label == field.text_row && text.find(part) != std::string::npos) found = true;
    EXPECT_TRUE(found) << "'" << part << "' in row " << field.text_row;
  }
}

// The forms scripts and people read, exactly as they were before the table.
TEST(CounterReportTest, JsonAndTextKeepTheirPublishedForm) {
  Stats stats;
  stats.entries = 3;
  stats.bytes = 300;
  stats.max_bytes = 1000;
  Counters& t = stats.totals;
  t.memory_hits = 1;
  t.disk_hits = 2;
  t.coalesced = 3;
  t.misses = 4;
  t.produces = 5;
  t.produce_failures = 6;
  t.quarantined = 7;
  t.evicted = 8;
  t.compile_ms_spent = 1500;
  t.compile_ms_saved = 250.5;
  t.provider_hits = 15;
  t.provider_rejects = 16;
  t.remote_hits = 9;
  t.remote_misses = 10;
  t.remote_rejects = 11;
  t.remote_uploads = 12;
  t.remote_lease_waits = 13;
  t.remote_errors = 14;
  EXPECT_EQ(to_json(stats).dump(),
            R"({"entries":3,"bytes":300,"max_bytes":1000,"hits":{"memory":1,"disk":2},"coalesced":3,)"
            R"("misses":4,"compiles":5,"compile_failures":6,"compile_ms":{"spent":1500.0,"saved":250.5},)"
            R"("quarantined":7,"evicted":8,"provider":{"hits":15,"rejected":16},)"
            R"("remote":{"hits":9,"misses":10,"rejected":11,"uploads":12,"lease_waits":13,"errors":14}})");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"hits", "memory 1, disk 2, waited for a thread 3"}, {"misses", "4"},      {"compiles", "5 (6 failed)"},
      {"compile time", "spent 1.5 s, saved 0.3 s"},        {"quarantined", "7"}, {"evicted", "8"},
      {"providers", "hits 15, rejected 16"},
      {"remote", "hits 9, misses 10, rejected 11, uploads 12, lease waits 13, errors 14"}};
  EXPECT_EQ(counter_text_rows(t), expected);
}

}  // namespace
}  // namespace jitcache::cache
