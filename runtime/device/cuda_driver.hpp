// The CUDA driver, opened at run time. libjitcache never links libcuda: on a machine
// without a driver or a GPU, everything but kernel launches still works, and
// CudaDriver::load() says clearly why there is no device.
//
// Each entry point is resolved once (dlsym of its versioned name) into a table; an
// optional one is null when the driver lacks it.
#pragma once

#include <cuda.h>  // types only; no symbol of libcuda is referenced at link time

#include <memory>
#include <string>

#include "jitcache/error.hpp"

namespace jitcache {

struct CudaDriverApi {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, CUdevice_attribute, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned int, CUjit_option*, void**);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                             unsigned int, unsigned int, unsigned int, CUstream, void**, void**);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuEventCreate)(CUevent*, unsigned int);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  // Optional (null when this driver lacks them): streams, stream capture and CUDA graphs,
  // and the device's free memory, for the GPU check (bench/bench_gpu_kernels.cpp).
  CUresult (*cuStreamCreate)(CUstream*, unsigned int);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);

  // Whether the optional stream, capture and graph entry points are all there.
  bool has_graphs() const {
    return cuStreamCreate && cuStreamDestroy && cuStreamBeginCapture && cuStreamEndCapture && cuGraphInstantiate &&
           cuGraphLaunch && cuGraphExecDestroy && cuGraphDestroy;
  }
};

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int major = 0;
  int minor = 0;
  int driver_version = 0;  // e.g. 13000
  // Which targets' cubins run here follows from major.minor alone (kernel_spec.hpp:
  // targets_for_device); the driver knows no target names.
};

class CudaDriver {
 public:
  // The process-wide driver with device `ordinal`'s primary context current on the
  // calling thread. ErrorCode::unavailable with the reason when there is no driver
  // library, no device, or the device cannot be initialized.
  static Result<std::shared_ptr<CudaDriver>> load(int ordinal = 0);

  const CudaDriverApi& api() const { return m_api; }
  const DeviceInfo& device() const { return m_device; }
  // Makes the primary context current on the calling thread.
  Status make_current() const;

  // A driver call's result as a Status naming the call.
  Status check(CUresult result, const char* call) const;

  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

 private:
  CudaDriver() = default;
  void* m_library = nullptr;
  CudaDriverApi m_api{};
  DeviceInfo m_device;
  CUcontext m_context = nullptr;
};

}  // namespace jitcache
