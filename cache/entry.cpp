#include "cache/entry.hpp"

namespace jitcache::cache {

Counters& Counters::operator+=(const Counters& other) {
#define JC_COUNTER_ADD(member, type, json, text_row, text_part, description) member += other.member;
  JC_CACHE_COUNTERS(JC_COUNTER_ADD)
#undef JC_COUNTER_ADD
  return *this;
}

double counter_value(const CounterField& field, const Counters& counters) {
  switch (field.kind) {
    case CounterKind::count: return static_cast<double>(counters.*field.count);
    case CounterKind::milliseconds: return counters.*field.milliseconds;
  }
  return 0;
}

}  // namespace jitcache::cache
