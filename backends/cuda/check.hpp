// Every CUDA runtime and cuBLASLt call is checked; failures become attnbwd::Error.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "attnbwd/error.hpp"

namespace attnbwd::cuda {

[[noreturn]] inline void fail(const char* what, const char* file, int line, const std::string& detail) {
  throw Error(std::string("cuda backend: ") + what + " failed (" + detail + ") at " + file + ":" +
              std::to_string(line));
}

// Whether p is 16-byte aligned (the condition of the kernels' float4 / 16-byte access paths).
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace attnbwd::cuda

#define ATTNBWD_CUDA_CHECK(call)                                                         \
  do {                                                                                   \
    const cudaError_t attnbwd_err_ = (call);                                             \
    if (attnbwd_err_ != cudaSuccess)                                                     \
      ::attnbwd::cuda::fail(#call, __FILE__, __LINE__, cudaGetErrorString(attnbwd_err_)); \
  } while (0)

#define ATTNBWD_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                             \
    const cublasStatus_t attnbwd_st_ = (call);                                                     \
    if (attnbwd_st_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::attnbwd::cuda::fail(#call, __FILE__, __LINE__, "cublas status " + std::to_string(attnbwd_st_)); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at the next sync.
#define ATTNBWD_CUDA_CHECK_LAUNCH() ATTNBWD_CUDA_CHECK(cudaGetLastError())
