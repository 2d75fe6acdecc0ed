#include "runtime/compile/toolkit_search.hpp"

#include <cuda.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>

#include "runtime/compile/toolkit_trust.hpp"
#include "support/enum_names.hpp"
#include "support/env.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);  // follows symbolic links
}

bool is_dir(const fs::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

const env::EnvVar& tool_env(ToolkitTool tool) {
  switch (tool) {
    case ToolkitTool::nvrtc: return env::jitcache_nvrtc;
    case ToolkitTool::nvjitlink: return env::jitcache_nvjitlink;
    case ToolkitTool::nvvm: return env::jitcache_nvvm;
  }
  return env::jitcache_nvrtc;
}

// The package directories of the tool, relative to site-packages.
std::vector<std::string> pip_dirs(ToolkitTool tool) {
  const int major = toolkit_major();
  const std::string cu = "nvidia/cu" + std::to_string(major);
  switch (tool) {
    case ToolkitTool::nvrtc: return {major >= 13 ? cu + "/lib" : "nvidia/cuda_nvrtc/lib"};
    case ToolkitTool::nvjitlink: return {major >= 13 ? cu + "/lib" : "nvidia/nvjitlink/lib"};
    case ToolkitTool::nvvm:
      if (major >= 13) return {cu + "/lib", cu + "/nvvm/lib64"};
      return {"nvidia/cuda_nvcc/nvvm/lib64"};
  }
  return {};
}

// The tool's directories inside a toolkit root.
std::vector<std::string> toolkit_dirs(ToolkitTool tool) {
  if (tool == ToolkitTool::nvvm) return {"lib64", "nvvm/lib64", "lib"};
  return {"lib64", "lib"};
}

// argv[0] as the process was started: the path a virtual environment's interpreter was
// run by, before the symbolic link to the base interpreter is followed.
std::optional<fs::path> started_as() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string argv0;
  if (!in || !std::getline(in, argv0, '\0') || argv0.empty()) return std::nullopt;
  std::error_code ec;
  if (argv0.find('/') == std::string::npos) {
    // A bare name (`python` with the environment's bin/ on PATH but not activated, as in a
    // container image): the first executable of that name on PATH, as the shell found it.
    // PATH is the system's variable, not one of jitcache's (support/env.hpp).
    const char* value = std::getenv("PATH");
    if (value == nullptr) return std::nullopt;
    const std::string path = value;
    for (std::size_t start = 0; start <= path.size();) {
      const std::size_t end = std::min(path.find(':', start), path.size());
      const fs::path candidate = fs::path(path.substr(start, end - start)) / argv0;
      if (end > start && candidate.is_absolute() && ::access(candidate.c_str(), X_OK) == 0 &&
          fs::is_regular_file(candidate, ec))
        return candidate.lexically_normal();
      start = end + 1;
    }
    return std::nullopt;
  }
  const fs::path path = fs::absolute(argv0, ec);
  if (ec) return std::nullopt;
  return path.lexically_normal();
}

// Python prefixes, each with how it was found.
std::vector<std::pair<fs::path, std::string>> python_prefixes() {
  std::vector<std::pair<fs::path, std::string>> prefixes;
  if (const auto v = env::get(env::virtual_env)) prefixes.emplace_back(*v, "VIRTUAL_ENV");
  if (const auto v = env::get(env::conda_prefix)) prefixes.emplace_back(*v, "CONDA_PREFIX");
  if (const auto argv0 = started_as()) {
    // A virtual environment keeps pyvenv.cfg above its bin/ directory.
    const fs::path prefix = argv0->parent_path().parent_path();
    if (is_file(prefix / "pyvenv.cfg")) prefixes.emplace_back(prefix, "the virtual environment of " + argv0->string());
  }
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (!ec) prefixes.emplace_back(exe.parent_path().parent_path(), "the installation of " + exe.string());
  if (const auto v = env::get(env::pythonhome)) {
    // PYTHONHOME is "prefix" or "prefix:exec_prefix".
    const std::string prefix = v->substr(0, v->find(':'));
    if (!prefix.empty()) prefixes.emplace_back(prefix, "PYTHONHOME");
  }
  return prefixes;
}

// site-packages and dist-packages of every python3.* under prefix/lib and prefix/lib64.
std::vector<fs::path> site_directories(const fs::path& prefix) {
  std::vector<fs::path> found;
  for (const char* lib : {"lib", "lib64"}) {
    std::error_code ec;
    fs::directory_iterator it(prefix / lib, ec);
    if (ec) continue;
    std::vector<fs::path> pythons;
    for (const auto& entry : it)
      if (entry.path().filename().string().starts_with("python3")) pythons.push_back(entry.path());
    std::sort(pythons.begin(), pythons.end());
    for (const auto& python : pythons)
      for (const char* site : {"site-packages", "dist-packages"})
        if (is_dir(python / site)) found.push_back(python / site);
  }
  return found;
}

// Files of already loaded libraries whose name starts with `soname`.
std::vector<fs::path> loaded_copies(const std::string& soname) {
  struct Search {
    std::string soname;
    std::vector<fs::path> found;
  } search{soname, {}};
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
        const fs::path file(info->dlpi_name);
        if (file.filename().string().starts_with(s->soname)) s->found.push_back(file);
        return 0;
      },
      &search);
  return search.found;
}

// Toolkit roots: the variables, then the conventional installations, newest version first.
std::vector<std::pair<fs::path, std::string>> toolkit_roots() {
  std::vector<std::pair<fs::path, std::string>> roots;
  if (const auto v = env::get(env::cuda_home)) roots.emplace_back(*v, "CUDA_HOME");
  if (const auto v = env::get(env::cuda_path)) roots.emplace_back(*v, "CUDA_PATH");
  roots.emplace_back("/usr/local/cuda", "the toolkit");
  std::vector<fs::path> versioned;
  std::error_code ec;
  const std::string prefix = "cuda-" + std::to_string(toolkit_major()) + ".";
  for (fs::directory_iterator it("/usr/local", ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().starts_with(prefix)) versioned.push_back(it->path());
  std::sort(versioned.begin(), versioned.end(), [](const fs::path& a, const fs::path& b) {
    // cuda-13.10 is newer than cuda-13.9: compare the minor version as a number.
    const auto minor = [](const fs::path& p) {
      const std::string name = p.filename().string();
      return std::atoi(name.c_str() + name.find('.') + 1);
    };
    return minor(a) > minor(b);
  });
  for (const auto& dir : versioned) roots.emplace_back(dir, "the toolkit");
  return roots;
}

}  // namespace

int toolkit_major() { return CUDA_VERSION / 1000; }

const char* tool_display_name(ToolkitTool tool) { return enum_name(tool, {"NVRTC", "nvJitLink", "libNVVM"}); }

std::string tool_soname(ToolkitTool tool) {
  switch (tool) {
    case ToolkitTool::nvrtc: return "libnvrtc.so." + std::to_string(toolkit_major());
    case ToolkitTool::nvjitlink: return "libnvJitLink.so." + std::to_string(toolkit_major());
    case ToolkitTool::nvvm: return "libnvvm.so.4";
  }
  return {};
}

std::string tool_pip_package(ToolkitTool tool) {
  const std::string suffix = toolkit_major() >= 13 ? "" : "-cu" + std::to_string(toolkit_major());
  switch (tool) {
    case ToolkitTool::nvrtc: return "nvidia-cuda-nvrtc" + suffix;
    case ToolkitTool::nvjitlink: return "nvidia-nvjitlink" + suffix;
    case ToolkitTool::nvvm: return "nvidia-cuda-nvcc" + suffix;
  }
  return {};
}

const char* tool_env_name(ToolkitTool tool) { return tool_env(tool).name.data(); }

std::vector<fs::path> python_site_directories() {
  std::vector<fs::path> sites;
  std::set<std::string> seen;
  for (const auto& [prefix, origin] : python_prefixes())
    for (const auto& site : site_directories(prefix))
      if (seen.insert(site.lexically_normal().string()).second) sites.push_back(site);
  return sites;
}

std::vector<ToolkitCandidate> toolkit_candidates(ToolkitTool tool) {
  if (const auto chosen = env::get(tool_env(tool))) return {{*chosen, tool_env_name(tool)}};
  const std::string soname = tool_soname(tool);
  std::vector<ToolkitCandidate> candidates;
  std::set<std::string> seen;
  const auto add = [&](const fs::path& path, const std::string& origin) {
    const std::string text = path.lexically_normal().string();
    if (seen.insert(text).second) candidates.push_back({text, origin});
  };
  for (const auto& [prefix, origin] : python_prefixes())
    for (const auto& site : site_directories(prefix))
      for (const auto& dir : pip_dirs(tool))
        add(site / dir / soname, "the pip package " + tool_pip_package(tool) + " (Python environment from " + origin + ")");
  for (const auto& file : loaded_copies(tool == ToolkitTool::nvrtc ? soname : tool_soname(ToolkitTool::nvrtc))) {
    // NVRTC: the loaded copy itself; the others: beside the loaded NVRTC (one toolkit).
    if (tool == ToolkitTool::nvrtc) {
      add(file, "the NVRTC already loaded");
    } else {
      for (const auto& dir : tool == ToolkitTool::nvvm ? std::vector<fs::path>{".", "../nvvm/lib64"}
                                                        : std::vector<fs::path>{"."})
        add(file.parent_path() / dir / soname, "beside the NVRTC already loaded");
    }
  }
  if (tool != ToolkitTool::nvrtc)
    for (const auto& file : loaded_copies(soname)) add(file, std::string("the ") + tool_display_name(tool) + " already loaded");
  for (const auto& [root, origin] : toolkit_roots())
    for (const auto& dir : toolkit_dirs(tool)) add(root / dir / soname, origin + " " + root.string());
  // The soname's own search begins with LD_LIBRARY_PATH: its files can be told without
  // loading them (ld.so.cache's cannot).
  if (const auto paths = env::get(env::ld_library_path)) {
    std::string_view rest = *paths;
    while (!rest.empty()) {
      const std::string_view dir = rest.substr(0, rest.find(':'));
      rest.remove_prefix(std::min(rest.size(), dir.size() + 1));
      if (!dir.empty()) add(fs::path(dir) / soname, "LD_LIBRARY_PATH");
    }
  }
  candidates.push_back({soname, "the loader's search (LD_LIBRARY_PATH, ld.so.cache)"});
  return candidates;
}

std::optional<ToolkitCandidate> locate_toolkit_file(ToolkitTool tool) {
  for (const ToolkitCandidate& candidate : toolkit_candidates(tool)) {
    if (candidate.path.find('/') == std::string::npos) return std::nullopt;
    if (!is_file(candidate.path)) continue;
    std::error_code ec;
    const fs::path file = fs::canonical(candidate.path, ec);
    if (ec) continue;
    // A file cut short, or one another user could replace, is passed over with a warning:
    // the search goes on, as the loader would (open_toolkit_library skips it the same way).
    if (!usable_library(file, candidate.origin)) continue;
    return ToolkitCandidate{file.string(), candidate.origin};
  }
  return std::nullopt;
}

std::string not_found_message(ToolkitTool tool, const std::vector<ToolkitCandidate>& candidates) {
  std::string places;
  for (const auto& c : candidates) places += "\n  " + c.path + " (" + c.origin + ")";
  return not_found_summary(tool) + ". Searched:" + places;
}

std::string not_found_summary(ToolkitTool tool) {
  return std::string(tool_display_name(tool)) + " is not available: no " + tool_soname(tool) +
         " loaded from any place searched; install it into the Python environment with `pip install " +
         tool_pip_package(tool) + "`, or name the file with " + tool_env_name(tool);
}

std::string stand_in_warning(ToolkitTool tool, const std::string& version, const std::string& fingerprint) {
  const std::string name = tool_display_name(tool);
  return name + ": none found; lookups are keyed with the " + name + " this cache was last keyed with (" + version +
         ", fingerprint " + fingerprint + "): kernels in the cache are served, a kernel that is not cannot be " +
         "compiled. " + not_found_summary(tool);
}

}  // namespace jitcache
