// What the C ABI's calls on a model (jitcache_model_*, jitcache_launch_*, the host kernels
// of a model's layer) share: the handle's checks, the call held inside its gate, and the
// refusal of a layer the model does not have.
#pragma once

#include <cstdint>
#include <string>

#include "jitcache/jitcache.h"
#include "jitcache/runtime.hpp"
#include "runtime/capi/c_api_support.hpp"
#include "runtime/capi/handles.hpp"

namespace jitcache::capi {

// Runs `body(const PreparedModel&)` while `model` is held open, after the checks in the
// order every call on a model makes them: the model is given, it is not closed (nor
// closing), and the call's pointer `arg` (its output or its arguments, named `arg_name`
// in the message) is given.
template <class Body>
jitcache_status on_model(const char* self, const jitcache_model* model, const void* arg, const char* arg_name,
                         Body&& body) {
  if (model == nullptr) return null_argument(self, "model");
  const auto pass = model->gate.enter();
  if (!pass) return closed_handle(self, "model");
  if (arg == nullptr) return null_argument(self, arg_name);
  return body(*model->model);
}

// `layer` is not one of `model`'s layers: the message says how many it has.
inline jitcache_status no_layer(const char* self, const PreparedModel& model, std::int32_t layer) {
  return fail(JITCACHE_ERROR_INVALID_ARGUMENT, std::string(self) + ": no layer " + std::to_string(layer) +
                                                   " (the model has " + std::to_string(model.layers().size()) +
                                                   ")");
}

}  // namespace jitcache::capi
