// fp32 → fp16 copies for GEMM operands, and the switch choosing them. The fp32 ops
// (vision_mha_norm, vision_varlen_rope) run their projection GEMMs in Default with fp16 operands,
// fp32 accumulation and fp32 results: spec §4 and §5 measured all-GEMMs-fp16 to pass every workload.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstdint>
#include <initializer_list>

#include "lt_gemm.hpp"

namespace attnbwd::cuda {

// y[0, n) = fp16(x[0, n)), round to nearest even; 16-byte loads where x allows. y: 16-byte aligned.
void convert_to_half(const float* x, __half* y, std::int64_t n, cudaStream_t stream);

// Several such copies in one launch (at most kMaxHalfCopies; each with convert_to_half's contract), so
// small problems pay one launch instead of one per tensor. The blocks are shared out in proportion to
// the copies' sizes. A copy with a scale converts x·scale (one fp32 multiply, then the rounding: for a
// power-of-2 scale the product is exact; 1 leaves every value as it is).
struct HalfCopy {
  const float* x;
  __half* y;
  std::int64_t n;
  float scale = 1.0f;
};
constexpr int kMaxHalfCopies = 4;
void convert_to_half(std::initializer_list<HalfCopy> copies, cudaStream_t stream);

// ATTNBWD_CUDA_FP32_GEMM=auto|fp16|tf32: the Default mode's GEMM operands in the fp32 ops (auto =
// fp16; tf32 = the fp32 tensors with TF32 tensor cores, for A/B timing). Strict ignores it.
bool fp16_gemms();

// A GEMM operand: an fp32 tensor, or its fp16 copy.
struct Operand {
  const void* p;
  cudaDataType_t t;
};
inline Operand operand(bool use_fp16, const float* x, const __half* h) {
  return use_fp16 ? Operand{h, CUDA_R_16F} : Operand{x, CUDA_R_32F};
}

// C (fp32) = op(A)·op(B) through lt_gemm: fp16 operands accumulate in fp32 (CUBLAS_COMPUTE_32F), fp32
// operands use `fp32_compute` (TF32 or full fp32, by mode).
void gemm(Context& ctx, int slot, cudaStream_t stream, cublasComputeType_t fp32_compute, Gemm g, Operand A,
          Operand B, float* C);

// C (fp16) = op(A)·op(B) with fp16 operands through lt_gemm: fp32 accumulation (CUBLAS_COMPUTE_32F), one rounding of
// the fp32 sum to fp16.
void gemm_half(Context& ctx, int slot, cudaStream_t stream, Gemm g, const __half* A, const __half* B, __half* C);

}  // namespace attnbwd::cuda
