// The C ABI's compile API, for kernels from outside: jitcache_declare_family,
// jitcache_compile and jitcache_lookup, the request's checks, and the kernel handles
// they hand out.
#include "jitcache/jitcache.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "jitcache/runtime.hpp"
#include "runtime/capi/c_api_support.hpp"
#include "runtime/capi/handles.hpp"
#include "runtime/capi/schema_json.hpp"
#include "runtime/compiled_kernel_json.hpp"

namespace jitcache::capi {
namespace {

// The fields through num_options are ABI 1's first compile request.
constexpr std::size_t k_compile_request_v1_size =
    offsetof(jitcache_compile_request, num_options) + sizeof(std::size_t);
// Bounds on what a C caller hands in, so that a garbage count is an error, not a crash
// deep in a copy.
constexpr std::size_t k_max_spec_facts = 256;
constexpr std::size_t k_max_headers = 4096;
constexpr std::size_t k_max_options = 4096;
constexpr std::size_t k_max_source_bytes = std::size_t{1} << 30;  // 1 GiB

std::optional<SourceKind> read_kind(jitcache_source_kind kind) {
  switch (abi_enum_value(kind)) {
    case JITCACHE_KIND_CUDA: return SourceKind::cuda;
    case JITCACHE_KIND_NVVM: return SourceKind::nvvm;
    case JITCACHE_KIND_PTX: return SourceKind::ptx;
    default: return std::nullopt;
  }
}

Result<std::map<std::string, std::string>> read_spec(const std::string& field, const jitcache_fact* spec,
                                                     std::size_t count) {
  if (count > k_max_spec_facts)
    return make_error(ErrorCode::invalid_argument, field + "num_spec is " + std::to_string(count) +
                                                       ", expected at most " + std::to_string(k_max_spec_facts));
  if (count > 0 && spec == nullptr)
    return make_error(ErrorCode::invalid_argument, field + "spec is NULL with num_spec " + std::to_string(count));
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < count; ++i) {
    const std::string at = field + "spec[" + std::to_string(i) + "]";
    if (spec[i].name == nullptr || spec[i].value == nullptr)
      return make_error(ErrorCode::invalid_argument, at + ": name or value is NULL");
    if (!out.emplace(spec[i].name, spec[i].value).second)
      return make_error(ErrorCode::invalid_argument, at + ": fact " + std::string(spec[i].name) + " is given twice");
  }
  return out;
}

Result<KernelRequest> read_request(const char* self, const jitcache_compile_request* given) {
  const std::string field = std::string(self) + ": request.";
  const jitcache_compile_request r = JC_TRY(read_input_struct(
      field, given, k_compile_request_v1_size, &jitcache_compile_request_init, "jitcache_compile_request_init"));
  KernelRequest request;
  if (is_unset(r.family)) return make_error(ErrorCode::invalid_argument, field + "family is NULL or empty");
  request.family = r.family;
  request.spec = JC_TRY(read_spec(field, r.spec, r.num_spec));
  const auto kind = read_kind(r.kind);
  if (!kind)
    return make_error(ErrorCode::invalid_argument,
                      field + "kind is " + std::to_string(abi_enum_value(r.kind)) +
                          ", expected JITCACHE_KIND_CUDA (0), JITCACHE_KIND_NVVM (1) or JITCACHE_KIND_PTX (2)");
  request.kind = *kind;
  if (r.text == nullptr || r.text_size == 0)
    return make_error(ErrorCode::invalid_argument, field + "text is NULL or text_size is 0");
  if (r.text_size > k_max_source_bytes)
    return make_error(ErrorCode::invalid_argument, field + "text_size is " + std::to_string(r.text_size) +
                                                       ", expected at most " + std::to_string(k_max_source_bytes));
  request.text.assign(r.text, r.text_size);
  if (r.num_headers > k_max_headers || (r.num_headers > 0 && r.headers == nullptr))
    return make_error(ErrorCode::invalid_argument, field + "headers is NULL or num_headers (" +
                                                       std::to_string(r.num_headers) + ") is over " +
                                                       std::to_string(k_max_headers));
  for (std::size_t i = 0; i < r.num_headers; ++i) {
    const jitcache_header& h = r.headers[i];
    const std::string at = field + "headers[" + std::to_string(i) + "]";
    if (is_unset(h.name) || (h.text == nullptr && h.size != 0) || h.size > k_max_source_bytes)
      return make_error(ErrorCode::invalid_argument, at + ": name is NULL or empty, or text and size disagree");
    request.headers.emplace_back(h.name, std::string(h.text == nullptr ? "" : h.text, h.size));
  }
  if (is_unset(r.entry)) return make_error(ErrorCode::invalid_argument, field + "entry is NULL or empty");
  request.entry = r.entry;
  if (is_unset(r.target)) return make_error(ErrorCode::invalid_argument, field + "target is NULL or empty");
  request.target = r.target;
  if (r.num_options > k_max_options || (r.num_options > 0 && r.options == nullptr))
    return make_error(ErrorCode::invalid_argument, field + "options is NULL or num_options (" +
                                                       std::to_string(r.num_options) + ") is over " +
                                                       std::to_string(k_max_options));
  for (std::size_t i = 0; i < r.num_options; ++i) {
    if (r.options[i] == nullptr)
      return make_error(ErrorCode::invalid_argument, field + "options[" + std::to_string(i) + "] is NULL");
    request.options.emplace_back(r.options[i]);
  }
  return request;
}

jitcache_status hand_out_kernel(CompiledKernel&& kernel, jitcache_kernel** out) {
  auto handle = std::make_unique<jitcache_kernel>();
  handle->kernel = std::move(kernel);
  *out = handle.release();
  return JITCACHE_OK;
}

}  // namespace
}  // namespace jitcache::capi

using namespace jitcache;
using namespace jitcache::capi;

extern "C" {

void jitcache_compile_request_init(jitcache_compile_request* request) {
  if (request == nullptr) return;
  *request = jitcache_compile_request{};
  request->struct_size = sizeof *request;
  request->kind = JITCACHE_KIND_CUDA;
}

jitcache_status jitcache_declare_family(jitcache_runtime* runtime, const char* schema_json) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (schema_json == nullptr) return null_argument(self, "schema_json");
    const auto schema = read_schema(self, schema_json);
    if (!schema) return fail(schema.error());
    if (auto declared = runtime->runtime->declare_family(*schema); !declared) return fail(declared.error());
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_compile(jitcache_runtime* runtime, const jitcache_compile_request* request,
                                 jitcache_kernel** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (request == nullptr) return null_argument(self, "request");
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const auto read = read_request(self, request);
    if (!read) return fail(read.error());
    auto compiled = runtime->runtime->compile(*read);
    if (!compiled) return fail(compiled.error());
    return hand_out_kernel(std::move(*compiled), out);
  });
}

jitcache_status jitcache_lookup(jitcache_runtime* runtime, const char* family, const jitcache_fact* spec,
                                size_t num_spec, const char* target, jitcache_lookup_outcome* outcome,
                                jitcache_kernel** out) {
  return guarded(__func__, [&](const char* self) {
    if (runtime == nullptr) return null_argument(self, "runtime");
    if (family == nullptr) return null_argument(self, "family");
    if (target == nullptr) return null_argument(self, "target");
    if (outcome == nullptr) return null_argument(self, "outcome");
    if (out == nullptr) return null_argument(self, "out");
    if (t_log_callback_depth > 0) return refused_in_log_callback(self);
    const auto facts = read_spec(std::string(self) + ": ", spec, num_spec);
    if (!facts) return fail(facts.error());
    auto found = runtime->runtime->lookup(family, *facts, target);
    if (!found) return fail(found.error());
    *out = nullptr;
    switch (found->outcome) {
      case LookupOutcome::hit: *outcome = JITCACHE_LOOKUP_HIT; return hand_out_kernel(std::move(*found->kernel), out);
      case LookupOutcome::miss: *outcome = JITCACHE_LOOKUP_MISS; break;
      case LookupOutcome::verify: *outcome = JITCACHE_LOOKUP_VERIFY; break;
    }
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_kernel_cubin(const jitcache_kernel* kernel, const uint8_t** data, size_t* size) {
  return guarded(__func__, [&](const char* self) {
    if (kernel == nullptr) return null_argument(self, "kernel");
    if (data == nullptr) return null_argument(self, "data");
    if (size == nullptr) return null_argument(self, "size");
    *data = kernel->kernel.cubin.data();
    *size = kernel->kernel.cubin.size();
    return JITCACHE_OK;
  });
}

jitcache_status jitcache_kernel_describe(const jitcache_kernel* kernel, char** out) {
  return guarded(__func__, [&](const char* self) {
    if (kernel == nullptr) return null_argument(self, "kernel");
    if (out == nullptr) return null_argument(self, "out");
    return hand_out(to_json(kernel->kernel), out);
  });
}

void jitcache_kernel_release(jitcache_kernel* kernel) { delete kernel; }

}  // extern "C"
