// How the readers of scale metadata (scales files, capture files) report bad fields: every
// problem of an input is collected, so one run shows them all. The error's message names
// the first ("<file>: field 'max_abs[3]': must be finite, got ...") and counts the rest;
// its detail lists them, capped so that a file with thousands of bad entries does not
// make a message of megabytes.
#pragma once

#include <cstddef>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "jitcache/error.hpp"

namespace jitcache::scales {

inline constexpr std::size_t k_max_reported_problems = 16;

// "boolean true" or "string \"x\"" reads better than a type name when the value is what was
// wrong; long strings are cut.
std::string describe_value(const nlohmann::json& value);

class FieldProblems {
 public:
  // Every line starts with `lead` ("<file>: ", or "" when each line names its own file);
  // field names get `field_prefix` ("nvfp4_ds_mla_outer_scales." inside config.json).
  explicit FieldProblems(std::string lead, std::string field_prefix = {})
      : m_lead(std::move(lead)), m_field_prefix(std::move(field_prefix)) {}

  void add(std::string_view text) {
    ++m_count;
    if (m_texts.size() < k_max_reported_problems) m_texts.push_back(m_lead + std::string(text));
  }
  void add_field(std::string_view field, std::string_view text) {
    add("field '" + m_field_prefix + std::string(field) + "': " + std::string(text));
  }
  bool empty() const { return m_count == 0; }

  // invalid_input; only meaningful when !empty().
  std::unexpected<Error> error() const {
    std::string message = m_texts.front();
    std::string detail;
    if (m_count > 1) {
      message += " (and " + std::to_string(m_count - 1) + " more problem" +
                 (m_count > 2 ? "s" : "") + ")";
      for (const std::string& text : m_texts) detail += (detail.empty() ? "" : "\n") + text;
      if (m_count > m_texts.size())
        detail += "\n... " + std::to_string(m_count - m_texts.size()) + " more not shown";
    }
    return make_error(ErrorCode::invalid_input, std::move(message), std::move(detail));
  }

 private:
  std::string m_lead;
  std::string m_field_prefix;
  std::vector<std::string> m_texts;
  std::size_t m_count = 0;
};

}  // namespace jitcache::scales
