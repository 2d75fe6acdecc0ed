#include "bench/sass_analysis.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <regex>

#include "support/enum_names.hpp"

namespace jitcache::sass {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::vector<std::string> split_operands(std::string_view text) {
  std::vector<std::string> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    if (c == ',' && depth == 0) {
      const auto piece = trim(text.substr(start, i - start));
      if (!piece.empty()) out.emplace_back(piece);
      start = i + 1;
    }
  }
  return out;
}

std::vector<std::string_view> modifiers(std::string_view opcode) {
  std::vector<std::string_view> out;
  std::size_t dot = opcode.find('.');
  while (dot != std::string_view::npos) {
    const std::size_t next = opcode.find('.', dot + 1);
    out.push_back(opcode.substr(dot + 1, next == std::string_view::npos ? next : next - dot - 1));
    dot = next;
  }
  return out;
}

bool is_predicate_name(std::string_view s) {
  return s.size() == 2 && s[0] == 'P' && s[1] >= '0' && s[1] <= '6';
}

}  // namespace

std::string Instruction::family() const { return opcode.substr(0, opcode.find('.')); }

bool Instruction::has_modifier(std::string_view modifier) const {
  for (auto m : modifiers(opcode))
    if (m == modifier) return true;
  return false;
}

std::string Instruction::text() const {
  std::string s = guard.empty() ? "" : "@" + guard + " ";
  s += opcode;
  for (std::size_t i = 0; i < operands.size(); ++i) s += (i == 0 ? " " : ", ") + operands[i];
  if (!target.empty()) s += " `(" + target + ")";
  return s;
}

const Function* Listing::find(std::string_view name) const {
  for (const auto& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

Result<Listing> parse_listing(std::string_view text) {
  static const std::regex instruction_re(R"(^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;\s*(/\*.*\*/\s*)?$)");
  static const std::regex label_re(R"(^([.$A-Za-z_][\w.$]*):\s*$)");
  static const std::regex type_re(R"(^\s*\.type\s+([^,\s]+)\s*,\s*@function\s*$)");
  static const std::regex line_re(R"re(^\s*//## File "([^"]*)", line (\d+))re");
  static const std::regex target_re(R"(`\(([^)]*)\))");

  Listing listing;
  std::set<std::string> declared;
  std::vector<std::string> pending_labels;
  std::string file;
  int line = 0;
  int line_number = 0;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string raw(text.substr(pos, eol - pos));
    pos = eol + 1;
    ++line_number;
    std::smatch m;
    if (std::regex_search(raw, m, line_re)) {
      const std::string path = m[1].str();
      file = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
      line = std::stoi(m[2].str());
      continue;
    }
    if (std::regex_match(raw, m, type_re)) {
      declared.insert(m[1].str());
      continue;
    }
    if (std::regex_match(raw, m, label_re)) {
      const std::string name = m[1].str();
      if (declared.count(name) != 0) {
        listing.functions.push_back(Function{name, {}, {}});
        pending_labels.clear();
        file.clear();
        line = 0;
      } else if (!listing.functions.empty()) {
        listing.functions.back().labels[name] = listing.functions.back().instructions.size();
      }
      continue;
    }
    if (!std::regex_match(raw, m, instruction_re)) continue;
    if (listing.functions.empty())
      return make_error(ErrorCode::invalid_input, "SASS listing line " + std::to_string(line_number) +
                                                      ": instruction outside a function");
    Instruction ins;
    ins.address = static_cast<std::uint32_t>(std::stoul(m[1].str(), nullptr, 16));
    std::string body = m[2].str();
    std::smatch t;
    if (std::regex_search(body, t, target_re)) {
      ins.target = t[1].str();
      body = t.prefix().str() + t.suffix().str();
    }
    std::string_view rest = trim(body);
    if (!rest.empty() && rest.front() == '@') {
      const std::size_t space = rest.find(' ');
      if (space == std::string_view::npos)
        return make_error(ErrorCode::invalid_input,
                          "SASS listing line " + std::to_string(line_number) + ": guard without an opcode");
      ins.guard = std::string(rest.substr(1, space - 1));
      rest = trim(rest.substr(space));
    }
    const std::size_t space = rest.find(' ');
    ins.opcode = std::string(rest.substr(0, space));
    if (ins.opcode.empty() || !(std::isupper(static_cast<unsigned char>(ins.opcode[0]))))
      return make_error(ErrorCode::invalid_input, "SASS listing line " + std::to_string(line_number) +
                                                      ": cannot read an opcode in \"" + raw + "\"");
    if (space != std::string_view::npos) ins.operands = split_operands(rest.substr(space));
    ins.line = line;
    ins.file = file;
    listing.functions.back().instructions.push_back(std::move(ins));
  }
  if (listing.functions.empty())
    return make_error(ErrorCode::invalid_input, "SASS listing holds no function (is it nvdisasm -c output?)");
  return listing;
}

std::string memory_access_key(const Instruction& ins) {
  static const std::set<std::string> k_families = {"LDG", "STG",  "LD",    "ST",    "LDS", "STS", "LDL",
                                                   "STL", "ATOM", "ATOMG", "ATOMS", "RED", "REDG"};
  const std::string family = ins.family();
  if (k_families.count(family) == 0) return {};
  std::string width = "32";
  for (auto m : modifiers(ins.opcode)) {
    if (m == "128" || m == "64") width = std::string(m);
    if (m == "U8" || m == "S8" || m == "U16" || m == "S16") width = std::string(m);
  }
  return family + "." + width;
}

bool is_global_or_generic_store(const Instruction& ins) {
  const std::string f = ins.family();
  return f == "STG" || f == "ST";
}

bool is_atomic(const Instruction& ins) {
  const std::string f = ins.family();
  return f == "ATOM" || f == "ATOMG" || f == "RED" || f == "REDG";
}

bool is_control(const Instruction& ins) {
  static const std::set<std::string> k_control = {"BRA",   "BRX",  "JMP",      "JMX",   "CALL",
                                                  "RET",   "EXIT", "KILL",     "BSSY",  "BSYNC",
                                                  "BREAK", "BMOV", "WARPSYNC", "YIELD", "BPT"};
  return k_control.count(ins.family()) != 0;
}

const char* to_string(Cold cold) {
  return enum_name(cold, {"both sides", "slow division", "status report", "NaN input", "early exit", "zero fill",
                          "diverged warp"});
}

namespace {

bool ends_block(const Instruction& ins) {
  const std::string f = ins.family();
  return f == "BRA" || f == "JMP" || f == "BRX" || f == "JMX" || f == "EXIT" || f == "KILL" || f == "RET";
}

bool never_executes(const Instruction& ins) { return ins.guard == "!PT" || ins.guard == "!UPT"; }
bool is_guarded(const Instruction& ins) {
  return !ins.guard.empty() && ins.guard != "PT" && ins.guard != "UPT";
}

// A conditional branch: guarded, or one whose condition is implicit (BRA.DIV: "the warp
// has diverged").
bool is_conditional_branch(const Instruction& ins) {
  const std::string f = ins.family();
  if ((f != "BRA" && f != "JMP") || never_executes(ins)) return false;
  if (is_guarded(ins) || ins.has_modifier("DIV")) return true;
  // BRA P1, `(target): a second condition as an operand.
  for (const auto& op : ins.operands)
    if (is_predicate_name(op) || (op.size() == 3 && op[0] == '!' && is_predicate_name(op.substr(1))))
      return true;
  return false;
}

struct Cfg {
  std::vector<BasicBlock> blocks;
  std::vector<std::size_t> block_of;  // instruction -> block
  std::vector<std::vector<std::size_t>> predecessors;
};

Result<std::size_t> label_index(const Function& fn, const std::string& label) {
  const auto it = fn.labels.find(label);
  if (it == fn.labels.end() || it->second >= fn.instructions.size())
    return make_error(ErrorCode::invalid_input, "SASS of " + fn.name + ": branch to unknown label " + label);
  return it->second;
}

Result<Cfg> build_cfg(const Function& fn) {
  const auto& code = fn.instructions;
  const std::size_t n = code.size();
  std::vector<bool> leader(n + 1, false);
  leader[0] = true;
  leader[n] = true;
  for (const auto& [name, index] : fn.labels) leader[std::min(index, n)] = true;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string f = code[i].family();
    if (f == "BRX" || f == "JMX")
      return make_error(ErrorCode::invalid_input,
                        "SASS of " + fn.name + ": indirect branch " + code[i].text() + " is not supported");
    if (ends_block(code[i])) leader[i + 1] = true;
  }
  Cfg cfg;
  cfg.block_of.assign(n, 0);
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (!leader[j]) ++j;
    for (std::size_t k = i; k < j; ++k) cfg.block_of[k] = cfg.blocks.size();
    cfg.blocks.push_back(BasicBlock{i, j, {}});
    i = j;
  }
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b) {
    auto& block = cfg.blocks[b];
    const Instruction& last = code[block.end - 1];
    const std::string f = last.family();
    const bool has_next = block.end < n;
    std::vector<std::size_t> succ;
    if ((f == "BRA" || f == "JMP") && !never_executes(last)) {
      succ.push_back(cfg.block_of[JC_TRY(label_index(fn, last.target))]);
      if (is_conditional_branch(last) && has_next) succ.push_back(b + 1);
    } else if (f == "EXIT" || f == "KILL" || f == "RET") {
      if ((is_guarded(last) || never_executes(last)) && has_next) succ.push_back(b + 1);
    } else if (has_next) {
      succ.push_back(b + 1);
    }
    std::sort(succ.begin(), succ.end());
    succ.erase(std::unique(succ.begin(), succ.end()), succ.end());
    block.successors = succ;
  }
  cfg.predecessors.assign(cfg.blocks.size(), {});
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b)
    for (std::size_t s : cfg.blocks[b].successors) cfg.predecessors[s].push_back(b);
  return cfg;
}

std::set<std::size_t> reach(const Cfg& cfg, std::size_t from) {
  std::set<std::size_t> seen;
  std::vector<std::size_t> stack{from};
  while (!stack.empty()) {
    const std::size_t b = stack.back();
    stack.pop_back();
    if (!seen.insert(b).second) continue;
    for (std::size_t s : cfg.blocks[b].successors) stack.push_back(s);
  }
  return seen;
}

bool writes_predicate(const Instruction& ins, const std::string& p) {
  if (ins.family() == "R2P") return !ins.operands.empty() && ins.operands[0] == "PR";
  // Predicate results come first (ISETP P0, PT, ...; FCHK P0, ...; LOP3.LUT P1, R7, ...)
  // or second, after a register result (IADD3 R8, P1, ...: a carry). Predicates read as
  // sources come later (FSEL's selector, a chained ISETP's last operand, IADD3.X's carry in).
  return (!ins.operands.empty() && ins.operands[0] == p) || (ins.operands.size() > 1 && ins.operands[1] == p);
}

// The instruction that last set predicate `p` before instruction `index`, when every path
// into it agrees on one (searched back through predecessors). Nothing when a guarded
// (possibly skipped) instruction sets it, paths disagree, or the entry is reached.
std::optional<std::size_t> find_predicate_definition(const Function& fn, const Cfg& cfg, std::size_t index,
                                                     const std::string& p) {
  constexpr std::size_t k_none = static_cast<std::size_t>(-1);
  constexpr std::size_t k_unknown = static_cast<std::size_t>(-2);
  // Per block, the definition reaching its end; k_none while being searched (a loop adds
  // nothing new).
  std::map<std::size_t, std::size_t> at_end;
  const std::function<std::size_t(std::size_t, std::size_t)> search = [&](std::size_t block,
                                                                          std::size_t end) -> std::size_t {
    for (std::size_t i = end; i > cfg.blocks[block].begin;) {
      --i;
      const Instruction& ins = fn.instructions[i];
      if (writes_predicate(ins, p)) return is_guarded(ins) ? k_unknown : i;
    }
    if (cfg.predecessors[block].empty() || at_end.size() > 512) return k_unknown;
    std::size_t found = k_none;
    for (std::size_t pred : cfg.predecessors[block]) {
      auto [it, fresh] = at_end.try_emplace(pred, k_none);
      if (fresh) it->second = search(pred, cfg.blocks[pred].end);
      const std::size_t d = at_end[pred];
      if (d == k_none) continue;
      if (d == k_unknown || (found != k_none && d != found)) return k_unknown;
      found = d;
    }
    return found;
  };
  const std::size_t d = search(cfg.block_of[index], index);
  if (d == k_none || d == k_unknown) return std::nullopt;
  return d;
}

// Whether `def` is a test "x is NaN" (true: tests NaN; false: tests "not NaN"); nothing when
// it is something else. The kernels test NaN on the bit pattern of |x|: an unsigned compare
// with +infinity's bits (0x7f800000 for fp32, 0x7f80 for a bf16 in 16 bits), or FSETP.NAN /
// FSETP.NUM. A chained test (ISETP ..., P0 combining another predicate) is not pure and is
// not recognised.
std::optional<bool> nan_test(const Instruction& def) {
  const std::string f = def.family();
  if (def.operands.size() < 5 || def.operands.back() != "PT" || !def.has_modifier("AND")) return std::nullopt;
  if (f == "FSETP") {
    if (def.has_modifier("NAN")) return true;
    if (def.has_modifier("NUM")) return false;
    return std::nullopt;
  }
  if (f != "ISETP" || !def.has_modifier("U32") || def.has_modifier("EX")) return std::nullopt;
  const std::string& bound = def.operands[3];
  const bool inf = bound == "0x7f800000" || bound == "0x7f80";
  const bool above_inf = bound == "0x7f800001" || bound == "0x7f81";
  if (def.has_modifier("GT") && inf) return true;
  if (def.has_modifier("GE") && above_inf) return true;
  if (def.has_modifier("LE") && inf) return false;
  if (def.has_modifier("LT") && above_inf) return false;
  return std::nullopt;
}

struct Side {
  std::set<std::size_t> region;  // blocks only this side reaches
  bool closed = true;            // the region leaves the kernel without rejoining the other side
  int stores = 0, zero_stores = 0, loads = 0, atomics = 0;
};

Side describe_side(const Function& fn, const Cfg& cfg, const std::set<std::size_t>& mine,
                   const std::set<std::size_t>& other) {
  Side side;
  for (std::size_t b : mine)
    if (other.count(b) == 0) side.region.insert(b);
  for (std::size_t b : side.region) {
    for (std::size_t s : cfg.blocks[b].successors)
      if (side.region.count(s) == 0) side.closed = false;
    for (std::size_t i = cfg.blocks[b].begin; i < cfg.blocks[b].end; ++i) {
      const Instruction& ins = fn.instructions[i];
      if (is_atomic(ins)) ++side.atomics;
      if (is_global_or_generic_store(ins)) {
        ++side.stores;
        if (!ins.operands.empty() && ins.operands.back() == "RZ") ++side.zero_stores;
      }
      const std::string f = ins.family();
      if (f == "LDG" || f == "LD") ++side.loads;
    }
  }
  return side;
}

BranchVerdict classify_branch(const Function& fn, const Cfg& cfg, std::size_t index) {
  BranchVerdict v;
  v.instruction = index;
  const Instruction& br = fn.instructions[index];
  const bool negated = !br.guard.empty() && br.guard[0] == '!';
  const std::string p = negated ? br.guard.substr(1) : br.guard;
  std::optional<std::size_t> def;
  if (is_predicate_name(p)) def = find_predicate_definition(fn, cfg, index, p);
  if (def) v.predicate_source = fn.instructions[*def].text();

  // A side is cut when the guard's value that leads there is the rare one: `rare_value`
  // is the value of the predicate register (before the guard's negation) on the rare side.
  const auto cut_when = [&](Cold why, bool rare_value) {
    v.cold = why;
    v.taken_is_cold = (rare_value != negated);
  };
  const std::size_t block = cfg.block_of[index];
  const auto& succ = cfg.blocks[block].successors;
  if (succ.size() != 2) return v;  // both edges lead to the same block
  const std::size_t taken = cfg.block_of[*label_index(fn, br.target)];
  const std::size_t fall = block + 1;
  const auto reach_taken = reach(cfg, taken), reach_fall = reach(cfg, fall);
  const Side t = describe_side(fn, cfg, reach_taken, reach_fall);
  const Side f = describe_side(fn, cfg, reach_fall, reach_taken);
  const auto size = [&](const Side& s) {
    int n = 0;
    for (std::size_t b : s.region) n += static_cast<int>(cfg.blocks[b].end - cfg.blocks[b].begin);
    return n;
  };
  v.taken_region_instructions = size(t);
  v.fall_region_instructions = size(f);
  const auto cut_side = [&](Cold why, bool taken_side) {
    v.cold = why;
    v.taken_is_cold = taken_side;
  };

  if (def && fn.instructions[*def].family() == "FCHK") {
    cut_when(Cold::slow_division, true);
    return v;
  }
  if (br.has_modifier("DIV")) {
    cut_side(Cold::diverged_warp, true);
    return v;
  }

  // The side that reports through the status word and stores nothing, where the other
  // side does the work (stores) or reports nothing.
  const auto reports = [](const Side& s, const Side& o) {
    return s.atomics > 0 && s.stores == 0 && (o.stores > 0 || o.atomics == 0);
  };
  if (reports(t, f) != reports(f, t)) {
    cut_side(Cold::status_report, reports(t, f));
    return v;
  }
  if (def) {
    if (const auto nan = nan_test(fn.instructions[*def])) {
      cut_when(Cold::nan_input, *nan);
      return v;
    }
  }
  const auto leaves_without_store = [](const Side& s, const Side& o) {
    return !s.region.empty() && s.closed && s.stores == 0 && o.stores > 0;
  };
  if (leaves_without_store(t, f) || leaves_without_store(f, t)) {
    cut_side(Cold::early_exit, leaves_without_store(t, f));
    return v;
  }
  const auto only_zeros = [](const Side& s, const Side& o) {
    return s.closed && s.stores > 0 && s.zero_stores == s.stores && s.loads == 0 && o.stores > o.zero_stores;
  };
  if (only_zeros(t, f) != only_zeros(f, t)) cut_side(Cold::zero_fill, only_zeros(t, f));
  return v;
}

void tally(MemoryTally& tally, const Instruction& ins) {
  const std::string key = memory_access_key(ins);
  if (key.empty()) return;
  ++tally.by_kind[key];
  ++tally.total;
  const std::string f = ins.family();
  if (f == "LDG" || f == "LD") ++tally.global_loads;
  if (f == "STG" || f == "ST") ++tally.global_stores;
  if (is_atomic(ins)) ++tally.atomics;
}

void add(MemoryTally& into, const MemoryTally& from) {
  for (const auto& [k, n] : from.by_kind) into.by_kind[k] += n;
  into.global_loads += from.global_loads;
  into.global_stores += from.global_stores;
  into.atomics += from.atomics;
  into.total += from.total;
}

int counted_instructions(const Function& fn) {
  // nvdisasm ends a function with a branch to itself and NOPs up to the alignment; neither
  // is ever reached.
  std::size_t n = fn.instructions.size();
  while (n > 0 && fn.instructions[n - 1].family() == "NOP") --n;
  if (n > 0) {
    const Instruction& last = fn.instructions[n - 1];
    const auto it = fn.labels.find(last.target);
    if (last.family() == "BRA" && !is_guarded(last) && it != fn.labels.end() && it->second == n - 1) --n;
  }
  return static_cast<int>(n);
}

Result<FunctionAnalysis> analyse_function(const Listing& listing, const Function& fn,
                                          std::set<std::string>& active) {
  FunctionAnalysis out;
  out.name = fn.name;
  const Cfg cfg = JC_TRY(build_cfg(fn));
  out.blocks = cfg.blocks;
  out.total_instructions = counted_instructions(fn);
  for (int i = 0; i < out.total_instructions; ++i) tally(out.memory_total, fn.instructions[i]);

  std::vector<std::set<std::size_t>> cold_successors(cfg.blocks.size());
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b) {
    const std::size_t last = cfg.blocks[b].end - 1;
    if (!is_conditional_branch(fn.instructions[last])) continue;
    const BranchVerdict v = classify_branch(fn, cfg, last);
    out.branches.push_back(v);
    if (v.cold == Cold::none || cfg.blocks[b].successors.size() != 2) continue;
    const std::size_t taken = cfg.block_of[*label_index(fn, fn.instructions[last].target)];
    cold_successors[b].insert(v.taken_is_cold ? taken : b + 1);
  }

  out.on_path.assign(cfg.blocks.size(), false);
  // Depth-first over the edges that stay, with colours to see a loop (an edge back to a
  // block still on the stack).
  std::vector<int> colour(cfg.blocks.size(), 0);
  const std::function<void(std::size_t)> visit = [&](std::size_t b) {
    colour[b] = 1;
    out.on_path[b] = true;
    for (std::size_t s : cfg.blocks[b].successors) {
      if (cold_successors[b].count(s) != 0) continue;
      if (colour[s] == 1) out.path_has_loop = true;
      if (colour[s] == 0) visit(s);
    }
    colour[b] = 2;
  };
  if (!cfg.blocks.empty()) visit(0);

  active.insert(fn.name);
  for (std::size_t b = 0; b < cfg.blocks.size(); ++b) {
    if (!out.on_path[b]) continue;
    for (std::size_t i = cfg.blocks[b].begin; i < cfg.blocks[b].end; ++i) {
      const Instruction& ins = fn.instructions[i];
      ++out.path_instructions;
      if (is_control(ins)) ++out.path_control_instructions;
      tally(out.memory_path, ins);
      if (ins.family() != "CALL") continue;
      // A call guarded by FCHK's verdict is the slow path of a division: not ordinary.
      if (is_guarded(ins)) {
        const bool negated = ins.guard[0] == '!';
        const std::string p = negated ? ins.guard.substr(1) : ins.guard;
        const auto def = is_predicate_name(p) ? find_predicate_definition(fn, cfg, i, p) : std::nullopt;
        if (def && fn.instructions[*def].family() == "FCHK" && !negated) continue;
      }
      const Function* callee = listing.find(ins.target);
      if (callee == nullptr)
        return make_error(ErrorCode::invalid_input,
                          "SASS of " + fn.name + ": call to unknown function " + ins.target);
      if (active.count(callee->name) != 0) {
        out.path_has_loop = true;  // recursion: counted once
        continue;
      }
      const FunctionAnalysis inner = JC_TRY(analyse_function(listing, *callee, active));
      out.path_instructions += inner.path_instructions;
      out.path_control_instructions += inner.path_control_instructions;
      out.path_has_loop = out.path_has_loop || inner.path_has_loop;
      add(out.memory_path, inner.memory_path);
      out.called.push_back(callee->name);
      for (const auto& c : inner.called) out.called.push_back(c);
    }
  }
  active.erase(fn.name);
  return out;
}

}  // namespace

Result<FunctionAnalysis> analyse(const Listing& listing, std::string_view entry) {
  const Function* fn = listing.find(entry);
  if (fn == nullptr)
    return make_error(ErrorCode::not_found, "SASS listing has no function " + std::string(entry));
  std::set<std::string> active;
  auto result = analyse_function(listing, *fn, active);
  if (result) {
    result->entry_instructions = result->total_instructions;
    // Whole-kernel totals include the subroutines the kernel may call.
    for (const auto& f : listing.functions) {
      if (f.name == fn->name) continue;
      result->total_instructions += counted_instructions(f);
      for (int i = 0; i < counted_instructions(f); ++i) tally(result->memory_total, f.instructions[i]);
    }
  }
  return result;
}

std::vector<std::pair<std::string, int>> path_lines(const Listing& listing,
                                                    const FunctionAnalysis& analysis) {
  std::map<std::string, int> counts;
  const Function* fn = listing.find(analysis.name);
  if (fn == nullptr) return {};
  for (std::size_t b = 0; b < analysis.blocks.size(); ++b) {
    if (!analysis.on_path[b]) continue;
    for (std::size_t i = analysis.blocks[b].begin; i < analysis.blocks[b].end; ++i) {
      const Instruction& ins = fn->instructions[i];
      ++counts[ins.line > 0 ? ins.file + ":" + std::to_string(ins.line) : std::string("(no line)")];
    }
  }
  std::vector<std::pair<std::string, int>> out(counts.begin(), counts.end());
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

bool same_code(const Listing& a, const Listing& b, std::string* difference) {
  const auto say = [&](const std::string& text) {
    if (difference != nullptr) *difference = text;
    return false;
  };
  if (a.functions.size() != b.functions.size())
    return say(std::to_string(a.functions.size()) + " functions against " +
               std::to_string(b.functions.size()));
  for (std::size_t f = 0; f < a.functions.size(); ++f) {
    const auto& fa = a.functions[f];
    const auto& fb = b.functions[f];
    if (fa.name != fb.name) return say("function " + fa.name + " against " + fb.name);
    if (fa.instructions.size() != fb.instructions.size())
      return say(fa.name + ": " + std::to_string(fa.instructions.size()) + " instructions against " +
                 std::to_string(fb.instructions.size()));
    for (std::size_t i = 0; i < fa.instructions.size(); ++i) {
      // Labels are numbered by the disassembler and may shift when line annotations
      // add entries; compare where branches lead, not what the label is called.
      Instruction x = fa.instructions[i], y = fb.instructions[i];
      const auto resolve = [](const Function& fn, Instruction& ins) {
        const auto it = fn.labels.find(ins.target);
        if (it != fn.labels.end()) ins.target = "#" + std::to_string(it->second);
      };
      resolve(fa, x);
      resolve(fb, y);
      if (x.address != y.address || x.text() != y.text())
        return say(fa.name + " instruction " + std::to_string(i) + ": \"" + x.text() + "\" against \"" +
                   y.text() + "\"");
    }
  }
  return true;
}

}  // namespace jitcache::sass
