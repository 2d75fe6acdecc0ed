// One subcommand declared in one call: its arguments, its CLI11 app and its action, so that
// a cmd_*.cpp's registration says only what differs from command to command (the name, the
// help, the options).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "tools/cli.hpp"

namespace jitcache::cli {

// A subcommand and the arguments its options fill: `app` for the options, `args` for what
// they bind to. The arguments live as long as the command's action, that is, the CLI.
template <typename Args>
struct Subcommand {
  CLI::App* app;
  Args& args;
};

namespace detail {

template <typename Args, typename Run>
Subcommand<Args> add_subcommand(CLI::App& parent, Context& context, std::string name, std::string help, Run run) {
  auto args = std::make_shared<Args>();
  CLI::App* app = parent.add_subcommand(std::move(name), std::move(help));
  context.bind(app, [args, run, &context] { return run(context, *args); });
  return {app, *args};
}

}  // namespace detail

// `parent`'s subcommand `name`, whose action runs `run` on its arguments (and the global
// options, or the whole context, where `run` takes them); its exit code is what `run` returns.
template <typename Args>
Subcommand<Args> add_subcommand(CLI::App& parent, Context& context, std::string name, std::string help,
                                int (*run)(const Args&)) {
  return detail::add_subcommand<Args>(parent, context, std::move(name), std::move(help),
                                      [run](const Context&, const Args& args) { return run(args); });
}
template <typename Args>
Subcommand<Args> add_subcommand(CLI::App& parent, Context& context, std::string name, std::string help,
                                int (*run)(const Args&, const GlobalOptions&)) {
  return detail::add_subcommand<Args>(
      parent, context, std::move(name), std::move(help),
      [run](const Context& bound, const Args& args) { return run(args, bound.global); });
}
template <typename Args>
Subcommand<Args> add_subcommand(CLI::App& parent, Context& context, std::string name, std::string help,
                                int (*run)(const Context&, const Args&)) {
  return detail::add_subcommand<Args>(parent, context, std::move(name), std::move(help), run);
}

// A command that only groups subcommands (`remote`, `scales`): one of them must be named.
inline CLI::App* add_command_group(CLI::App& root, std::string name, std::string help) {
  CLI::App* group = root.add_subcommand(std::move(name), std::move(help));
  group->require_subcommand(1);
  return group;
}

// A text option's value as an optional one: an empty value (the option left out, or given
// as "") is none.
template <typename T = std::string>
std::optional<T> unless_empty(const std::string& value) {
  return value.empty() ? std::nullopt : std::optional<T>(value);
}

}  // namespace jitcache::cli
