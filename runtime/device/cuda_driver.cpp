#include "runtime/device/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

namespace jitcache {
namespace {

template <class F>
bool resolve(void* library, F& slot, const char* name) {
  slot = reinterpret_cast<F>(dlsym(library, name));
  return slot != nullptr;
}

}  // namespace

Result<std::shared_ptr<CudaDriver>> CudaDriver::load(int ordinal) {
  // One driver per process and device; later callers share it.
  static std::mutex mutex;
  static std::shared_ptr<CudaDriver> loaded[16];
  if (ordinal < 0 || ordinal >= 16)
    return make_error(ErrorCode::invalid_argument, "device ordinal " + std::to_string(ordinal) + " is out of range");
  std::lock_guard lock(mutex);
  if (loaded[ordinal]) {
    JC_TRY(loaded[ordinal]->make_current());
    return loaded[ordinal];
  }

  std::shared_ptr<CudaDriver> driver(new CudaDriver());
  driver->m_library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver->m_library == nullptr)
    return make_error(ErrorCode::unavailable,
                      std::string("no CUDA driver: cannot open libcuda.so.1 (") + dlerror() + ")");
  CudaDriverApi& a = driver->m_api;
  void* lib = driver->m_library;
  // The _v2 names are the current ABI of calls whose first version took 32-bit sizes.
  const bool ok = resolve(lib, a.cuInit, "cuInit") && resolve(lib, a.cuDriverGetVersion, "cuDriverGetVersion") &&
                  resolve(lib, a.cuGetErrorString, "cuGetErrorString") &&
                  resolve(lib, a.cuGetErrorName, "cuGetErrorName") &&
                  resolve(lib, a.cuDeviceGetCount, "cuDeviceGetCount") && resolve(lib, a.cuDeviceGet, "cuDeviceGet") &&
                  resolve(lib, a.cuDeviceGetName, "cuDeviceGetName") &&
                  resolve(lib, a.cuDeviceGetAttribute, "cuDeviceGetAttribute") &&
                  resolve(lib, a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
                  resolve(lib, a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2") &&
                  resolve(lib, a.cuCtxSetCurrent, "cuCtxSetCurrent") &&
                  resolve(lib, a.cuCtxSynchronize, "cuCtxSynchronize") &&
                  resolve(lib, a.cuModuleLoadDataEx, "cuModuleLoadDataEx") &&
                  resolve(lib, a.cuModuleUnload, "cuModuleUnload") &&
                  resolve(lib, a.cuModuleGetFunction, "cuModuleGetFunction") &&
                  resolve(lib, a.cuLaunchKernel, "cuLaunchKernel") && resolve(lib, a.cuMemAlloc, "cuMemAlloc_v2") &&
                  resolve(lib, a.cuMemFree, "cuMemFree_v2") && resolve(lib, a.cuMemcpyHtoD, "cuMemcpyHtoD_v2") &&
                  resolve(lib, a.cuMemcpyDtoH, "cuMemcpyDtoH_v2") &&
                  resolve(lib, a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") &&
                  resolve(lib, a.cuMemsetD8, "cuMemsetD8_v2") &&
                  resolve(lib, a.cuStreamSynchronize, "cuStreamSynchronize") &&
                  resolve(lib, a.cuEventCreate, "cuEventCreate") &&
                  resolve(lib, a.cuEventDestroy, "cuEventDestroy_v2") &&
                  resolve(lib, a.cuEventRecord, "cuEventRecord") &&
                  resolve(lib, a.cuEventSynchronize, "cuEventSynchronize") &&
                  resolve(lib, a.cuEventElapsedTime, "cuEventElapsedTime");
  if (!ok)
    return make_error(ErrorCode::unavailable, std::string("the CUDA driver lacks an entry point jitcache needs (") +
                                                  dlerror() + ")");
  // Optional entry points, by the names cuda.h maps the calls to (CUDA 11.4 and later):
  // cuStreamBeginCapture_v2 takes a capture mode, cuGraphInstantiateWithFlags is
  // cuGraphInstantiate since CUDA 12; the others have one version.
  resolve(lib, a.cuStreamCreate, "cuStreamCreate");
  resolve(lib, a.cuStreamDestroy, "cuStreamDestroy_v2");
  resolve(lib, a.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  resolve(lib, a.cuStreamEndCapture, "cuStreamEndCapture");
  resolve(lib, a.cuGraphInstantiate, "cuGraphInstantiateWithFlags");
  resolve(lib, a.cuGraphLaunch, "cuGraphLaunch");
  resolve(lib, a.cuGraphExecDestroy, "cuGraphExecDestroy");
  resolve(lib, a.cuGraphDestroy, "cuGraphDestroy");
  resolve(lib, a.cuMemGetInfo, "cuMemGetInfo_v2");

  JC_TRY(driver->check(a.cuInit(0), "cuInit"));
  int count = 0;
  JC_TRY(driver->check(a.cuDeviceGetCount(&count), "cuDeviceGetCount"));
  if (ordinal >= count)
    return make_error(ErrorCode::unavailable, "no CUDA device " + std::to_string(ordinal) + " (the driver sees " +
                                                  std::to_string(count) + ")");
  CUdevice device = 0;
  JC_TRY(driver->check(a.cuDeviceGet(&device, ordinal), "cuDeviceGet"));
  DeviceInfo& info = driver->m_device;
  info.ordinal = ordinal;
  char name[256] = {};
  JC_TRY(driver->check(a.cuDeviceGetName(name, sizeof name - 1, device), "cuDeviceGetName"));
  info.name = name;
  JC_TRY(driver->check(a.cuDeviceGetAttribute(&info.major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
                       "cuDeviceGetAttribute"));
  JC_TRY(driver->check(a.cuDeviceGetAttribute(&info.minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device),
                       "cuDeviceGetAttribute"));
  JC_TRY(driver->check(a.cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion"));
  JC_TRY(driver->check(a.cuDevicePrimaryCtxRetain(&driver->m_context, device), "cuDevicePrimaryCtxRetain"));
  JC_TRY(driver->make_current());
  loaded[ordinal] = driver;
  return driver;
}

Status CudaDriver::make_current() const { return check(m_api.cuCtxSetCurrent(m_context), "cuCtxSetCurrent"); }

Status CudaDriver::check(CUresult result, const char* call) const {
  if (result == CUDA_SUCCESS) return {};
  const char* name = nullptr;
  const char* text = nullptr;
  if (m_api.cuGetErrorName) m_api.cuGetErrorName(result, &name);
  if (m_api.cuGetErrorString) m_api.cuGetErrorString(result, &text);
  const ErrorCode code = (result == CUDA_ERROR_NO_DEVICE || result == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH ||
                          result == CUDA_ERROR_NOT_INITIALIZED)
                             ? ErrorCode::unavailable
                             : ErrorCode::internal;
  return make_error(code, std::string(call) + " failed: " + (name ? name : "CUDA error " + std::to_string(result)) +
                              (text ? std::string(" (") + text + ")" : std::string()));
}

// The driver lives until process exit: releasing the primary context or dlclosing the
// library then would race with other users of the device in the same process.
CudaDriver::~CudaDriver() = default;

}  // namespace jitcache
