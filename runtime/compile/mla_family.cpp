#include "runtime/compile/mla_family.hpp"

#include <algorithm>

#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache {
namespace {

template <class Dim>
void add_dimension(SpecSchema& schema, const Dim& dimension) {
  schema.facts[std::string(dimension.fact)] = FactDomain{dimension.names()};
}

SpecSchema build_schema() {
  SpecSchema schema;
  schema.family = k_mla_family;
  add_dimension(schema, k_kernel_kinds);
  add_dimension(schema, k_latent_scales);
  add_dimension(schema, k_rope_formats);
  return schema;
}

}  // namespace

const SpecSchema& mla_schema() {
  static const SpecSchema schema = build_schema();
  return schema;
}

KernelRequest mla_request(const GeneratedSource& source, const std::vector<std::string>& options) {
  KernelRequest request;
  request.family = k_mla_family;
  request.spec = source.spec.to_facts();
  // The target travels in its own field, as in every request.
  request.spec.erase(std::string(k_targets.fact));
  request.kind = SourceKind::cuda;
  request.text = source.source;
  request.headers.reserve(source.headers.size());
  for (const auto& header : source.headers)
    request.headers.emplace_back(std::string(header.include_name), std::string(header.text));
  request.entry = source.entry;
  request.target = source.spec.target.name;
  const std::string arch = "--gpu-architecture=" + source.spec.target.arch_option();
  std::copy_if(options.begin(), options.end(), std::back_inserter(request.options),
               [&](const std::string& option) { return option != arch; });
  return request;
}

Status validate_mla_request(const KernelRequest& request) {
  if (request.family != k_mla_family)
    return make_error(ErrorCode::invalid_argument,
                      "kernel request of family '" + request.family + "' is not one of " + k_mla_family);
  return validate_spec(mla_schema(), request.spec);
}

}  // namespace jitcache
