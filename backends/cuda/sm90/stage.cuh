// The epilogue staging of an sm_90a wgmma accumulator fragment (m64nN, fp32) for a TMA store, shared by the kernels
// that stage their bf16 results in 64 × 64 boxes (linear_backward_sm90.cu, wgrad_small_k_sm90.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ptx.cuh"  // ATTNBWD_SM90_DEVICE

namespace attnbwd::cuda::sm90 {

#if defined(ATTNBWD_SM90_DEVICE)

// Converts the 64-column chunk q of this thread's accumulator fragment to bf16 into staging buffer b (64 rows x 128
// bytes, the TMA box layout with the 128-byte swizzle: 16-byte chunk c of row r at chunk c ^ (r % 8), which also
// makes the fragment's 4-byte writes, 8 rows x 4 lanes per instruction, hit 32 distinct banks). The fragment of the
// warpgroup's thread t: acc[4·j + 2·half + e] is row 16·(t / 32) + (t % 32) / 4 + 8·half, column 8·j + 2·(t % 4) + e.
template <int Q, int R>
__device__ __forceinline__ void stage_chunk(const float (&acc)[R], std::uint8_t* b) {
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  const int fr = warp * 16 + lane / 4, fc = 2 * (lane % 4);
#pragma unroll
  for (int jj = 0; jj < 8; ++jj) {
    const int j = 8 * Q + jj;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = fr + 8 * half;
      *reinterpret_cast<__nv_bfloat162*>(b + r * 128 + ((jj ^ (r % 8)) * 16) + fc * 2) =
          __floats2bfloat162_rn(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
    }
  }
}

#endif

}  // namespace attnbwd::cuda::sm90
