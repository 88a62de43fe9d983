// Warp-level tensor-core products from shared memory (mma.sync; arch-neutral, valid on sm_80 and
// later, so on sm_90a and sm_100a), shared by the attention kernels of the CUDA fast path. Plain CUDA
// C++, internal to backends/cuda.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace attnbwd::cuda::mma {

// x rounded to TF32 (nearest, ties away), as the bit pattern mma takes.
__device__ __forceinline__ std::uint32_t tf32(float x) {
  std::uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// c += a·b, m16n8k8, TF32 operands (bit patterns from tf32()), fp32 accumulation.
__device__ __forceinline__ void mma1688(float (&c)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                        std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ std::uint32_t half2_bits(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// c += a·b, m16n8k16, fp16 operands (pairs from half2_bits()), fp32 accumulation.
__device__ __forceinline__ void mma16816(float (&c)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc[j] (16×8 tile j of this warp's 16×(8·NT) result) += A·B over K on TF32 tensor cores (m16n8k8),
// operands rounded to TF32 as fragments are read. A: 16 rows of `A` (row stride lda); B(k, n) =
// B[n·ldb + k] when BT (B stored [n][k]), else B[k·ldb + n]. Split: 3xTF32 (a·b ≈ a_hi·b_hi +
// a_hi·b_lo + a_lo·b_hi), fp32-accurate. Conflict-free strides: lda (and ldb when BT) ≡ 4 (mod 32),
// ldb ≡ 8 (mod 32) otherwise.
template <bool Split, int NT, int K, bool BT>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[NT][4], const float* __restrict__ A, int lda,
                                              const float* __restrict__ B, int ldb) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 8) {
    const float af[4] = {A[g * lda + k0 + t], A[(g + 8) * lda + k0 + t], A[g * lda + k0 + t + 4],
                         A[(g + 8) * lda + k0 + t + 4]};
    std::uint32_t ah[4], al[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ah[i] = tf32(af[i]);
      if constexpr (Split) al[i] = tf32(af[i] - __uint_as_float(ah[i]));
    }
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int n = j * 8 + g;
      const float b0 = BT ? B[n * ldb + k0 + t] : B[(k0 + t) * ldb + n];
      const float b1 = BT ? B[n * ldb + k0 + t + 4] : B[(k0 + t + 4) * ldb + n];
      const std::uint32_t bh0 = tf32(b0), bh1 = tf32(b1);
      if constexpr (Split) {
        const std::uint32_t bl0 = tf32(b0 - __uint_as_float(bh0)), bl1 = tf32(b1 - __uint_as_float(bh1));
        mma1688(acc[j], al[0], al[1], al[2], al[3], bh0, bh1);
        mma1688(acc[j], ah[0], ah[1], ah[2], ah[3], bl0, bl1);
      }
      mma1688(acc[j], ah[0], ah[1], ah[2], ah[3], bh0, bh1);
    }
  }
}

}  // namespace attnbwd::cuda::mma
