// `jitcache env`: the environment registry with current values, plus any set variable
// under a jitcache prefix that is not declared (a typo that would otherwise do nothing).
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "support/env.hpp"
#include "tools/cli.hpp"

namespace jitcache::cli {
namespace {

using nlohmann::json;

struct EnvArgs {
  bool json = false;
};

int run_env(const EnvArgs& args) {
  int problems = 0;
  json variables = json::array();
  for (const env::EnvVar* var : env::registry()) {
    const auto value = env::shown_value(*var);  // a URL's password shown as ***
    const auto valid = env::check_value(*var);
    if (!valid) ++problems;
    if (args.json) {
      variables.push_back(
          {{"name", var->name},
           {"type", env::to_string(var->type)},
           {"default", var->default_value.empty() ? json(nullptr) : json(var->default_value)},
           {"value", value ? json(*value) : json(nullptr)},
           {"valid", valid.has_value()},
           {"error", valid ? json(nullptr) : json(valid.error().message)},
           {"doc", var->doc}});
      continue;
    }
    std::printf("%.*s=%s\n", static_cast<int>(var->name.size()), var->name.data(),
                value ? value->c_str() : "(unset)");
    std::printf("    %s; default: %s\n", env::to_string(var->type),
                var->default_value.empty() ? "none" : std::string(var->default_value).c_str());
    std::printf("    %.*s\n", static_cast<int>(var->doc.size()), var->doc.data());
    if (!valid) std::printf("    INVALID: %s\n", valid.error().message.c_str());
  }

  const auto unknown = env::unknown_prefixed_vars();
  problems += static_cast<int>(unknown.size());
  json unknown_json = json::array();
  for (const env::UnknownVar& u : unknown) {
    if (args.json) {
      unknown_json.push_back(
          {{"name", u.name}, {"suggestion", u.suggestion.empty() ? json(nullptr) : json(u.suggestion)}});
    } else {
      std::printf("\nunknown: %s is set but not declared by jitcache%s\n", u.name.c_str(),
                  u.suggestion.empty() ? "" : (" (did you mean " + u.suggestion + "?)").c_str());
    }
  }
  if (args.json) {
    std::cout << json{{"variables", variables},
                      {"unknown", unknown_json},
                      {"strict", env::strict_mode().value_or(false)}}
                     .dump(2)
              << "\n";
  }
  return problems == 0 ? k_exit_ok : k_exit_findings;
}

void register_env(CLI::App& root, Context& context) {
  auto args = std::make_shared<EnvArgs>();
  CLI::App* cmd = root.add_subcommand(
      "env", "Print every environment variable jitcache reads, with its current value");
  add_json_flag(cmd, args->json);
  context.bind(cmd, [args] { return run_env(*args); });
}

const Registrar k_registrar(95, register_env);

}  // namespace
}  // namespace jitcache::cli
