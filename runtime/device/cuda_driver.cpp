#include "runtime/device/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include "support/library_symbols.hpp"

namespace jitcache {
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
  // The _v2 names are the current ABI of calls whose first version took 32-bit sizes.
  const char* missing = bind_symbols(driver->m_library, {
      {"cuInit", &a.cuInit},
      {"cuDriverGetVersion", &a.cuDriverGetVersion},
      {"cuGetErrorString", &a.cuGetErrorString},
      {"cuGetErrorName", &a.cuGetErrorName},
      {"cuDeviceGetCount", &a.cuDeviceGetCount},
      {"cuDeviceGet", &a.cuDeviceGet},
      {"cuDeviceGetName", &a.cuDeviceGetName},
      {"cuDeviceGetAttribute", &a.cuDeviceGetAttribute},
      {"cuDevicePrimaryCtxRetain", &a.cuDevicePrimaryCtxRetain},
      {"cuDevicePrimaryCtxRelease_v2", &a.cuDevicePrimaryCtxRelease},
      {"cuCtxSetCurrent", &a.cuCtxSetCurrent},
      {"cuCtxSynchronize", &a.cuCtxSynchronize},
      {"cuModuleLoadDataEx", &a.cuModuleLoadDataEx},
      {"cuModuleUnload", &a.cuModuleUnload},
      {"cuModuleGetFunction", &a.cuModuleGetFunction},
      {"cuLaunchKernel", &a.cuLaunchKernel},
      {"cuMemAlloc_v2", &a.cuMemAlloc},
      {"cuMemFree_v2", &a.cuMemFree},
      {"cuMemcpyHtoD_v2", &a.cuMemcpyHtoD},
      {"cuMemcpyDtoH_v2", &a.cuMemcpyDtoH},
      {"cuMemcpyDtoDAsync_v2", &a.cuMemcpyDtoDAsync},
      {"cuMemsetD8_v2", &a.cuMemsetD8},
      {"cuStreamSynchronize", &a.cuStreamSynchronize},
      {"cuEventCreate", &a.cuEventCreate},
      {"cuEventDestroy_v2", &a.cuEventDestroy},
      {"cuEventRecord", &a.cuEventRecord},
      {"cuEventSynchronize", &a.cuEventSynchronize},
      {"cuEventElapsedTime", &a.cuEventElapsedTime},
  });
  if (missing != nullptr)
    return make_error(ErrorCode::unavailable, std::string("the CUDA driver lacks an entry point jitcache needs (") +
                                                  dlerror() + ")");
  // Optional entry points, by the names cuda.h maps the calls to (CUDA 11.4 and later):
  // cuStreamBeginCapture_v2 takes a capture mode, cuGraphInstantiateWithFlags is
  // cuGraphInstantiate since CUDA 12; the others have one version.
  // Each stays null where the driver lacks it (has_graphs() says whether graphs work).
  for (const LibrarySymbol& optional : std::initializer_list<LibrarySymbol>{
           {"cuStreamCreate", &a.cuStreamCreate},
           {"cuStreamDestroy_v2", &a.cuStreamDestroy},
           {"cuStreamBeginCapture_v2", &a.cuStreamBeginCapture},
           {"cuStreamEndCapture", &a.cuStreamEndCapture},
           {"cuGraphInstantiateWithFlags", &a.cuGraphInstantiate},
           {"cuGraphLaunch", &a.cuGraphLaunch},
           {"cuGraphExecDestroy", &a.cuGraphExecDestroy},
           {"cuGraphDestroy", &a.cuGraphDestroy},
           {"cuMemGetInfo_v2", &a.cuMemGetInfo},
       })
    if (void* address = ::dlsym(driver->m_library, optional.name())) optional.bind(address);

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
