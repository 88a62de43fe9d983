// Shared pieces of the standalone sm_90 probes in this folder (not part of the library, not built by CMake): the CUDA
// runtime error check, a shared-memory address and an mbarrier parity wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__device__ __forceinline__ std::uint32_t sa(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
// Spins until the mbarrier's phase of the given parity has completed.
__device__ __forceinline__ void bar_wait(std::uint64_t* b, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done)
                 : "r"(sa(b)), "r"(parity)
                 : "memory");
  } while (!done);
}
