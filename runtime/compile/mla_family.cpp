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
  add_dimension(schema, k_record_formats);
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
  // The request's spec names the format by name, whatever spelling the cache key uses for
  // it (KernelSpec::to_facts: `rope=bf16|fp8` for the first two formats); the key of the
  // compiled kernel is KernelCache's, made from the generated source's facts.
  request.spec = {{std::string(k_kernel_kinds.fact), to_string(source.spec.kernel)},
                  {std::string(k_latent_scales.fact), to_string(source.spec.latent_scale)},
                  {std::string(k_record_formats.fact), to_string(source.spec.format)}};
  // The target travels in its own field, as in every request.
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
