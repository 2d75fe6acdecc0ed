#include "runtime/compile/ptx_analysis.hpp"

#include <algorithm>
#include <sstream>

namespace jitcache {
namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t\r;");
  return s.substr(first, last - first + 1);
}

// Splits "op.mod  %f1, %f2, [x];" into the opcode and its operands.
void split_instruction(std::string_view line, std::string& opcode, std::vector<std::string>& operands) {
  operands.clear();
  line = trim(line);
  if (!line.empty() && line.front() == '@') {  // predicate guard
    const auto sp = line.find_first_of(" \t");
    line = trim(line.substr(sp == std::string_view::npos ? line.size() : sp));
  }
  const auto sp = line.find_first_of(" \t");
  opcode = std::string(line.substr(0, sp));
  if (sp == std::string_view::npos) return;
  std::string_view rest = line.substr(sp);
  std::string current;
  int depth = 0;
  for (char c : rest) {
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      operands.emplace_back(trim(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!trim(current).empty()) operands.emplace_back(trim(current));
}

}  // namespace

Result<PtxParamUse> analyze_param_use(std::string_view ptx, std::string_view entry, int param_index) {
  PtxParamUse use;
  use.param = std::string(entry) + "_param_" + std::to_string(param_index);
  const std::string header = ".entry " + std::string(entry) + "(";
  const auto at = ptx.find(header);
  if (at == std::string_view::npos)
    return make_error(ErrorCode::not_found, "PTX has no entry '" + std::string(entry) + "'");
  // The body runs to the next top-level entry or function (or the end).
  auto end = ptx.find("\n.visible", at + header.size());
  const auto next_func = ptx.find("\n.func", at + header.size());
  end = std::min(end, next_func);
  const std::string_view body = ptx.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);

  std::istringstream lines{std::string(body)};
  std::string line, opcode;
  std::vector<std::string> operands;
  auto tainted = [&](const std::string& operand) {
    return std::find(use.registers.begin(), use.registers.end(), operand) != use.registers.end();
  };
  while (std::getline(lines, line)) {
    split_instruction(line, opcode, operands);
    if (opcode.empty() || operands.empty()) continue;
    if (opcode.rfind("ld.param", 0) == 0 && operands.size() == 2 && operands[1] == "[" + use.param + "]") {
      use.registers.push_back(operands[0]);
      continue;
    }
    const bool reads = std::any_of(operands.begin() + 1, operands.end(), tainted);
    if (!reads) continue;
    const std::string text(trim(line));
    if (opcode.rfind("mov", 0) == 0 || opcode.rfind("cvt", 0) == 0) {
      use.registers.push_back(operands[0]);  // a copy carries the value on
    } else if (opcode.rfind("setp", 0) == 0) {
      use.comparisons.push_back(text);
    } else {
      use.arithmetic.push_back(text);  // mul, div, fma, rcp, ...: computes with the value
    }
  }
  if (use.registers.empty())
    return make_error(ErrorCode::not_found, "PTX entry '" + std::string(entry) +
                                                "' never loads its parameter " + use.param);
  return use;
}

}  // namespace jitcache
