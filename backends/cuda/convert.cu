#include "convert.hpp"

#include <algorithm>

#include "check.hpp"
#include "switches.hpp"

namespace attnbwd::cuda {
namespace {

constexpr int kThreads = 256;

// The copy of block `b` of `nb` blocks (thread t of it): y[0, n) = fp16(x[0, n) · scale).
__device__ __forceinline__ void to_half_part(const float* __restrict__ x, __half* __restrict__ y, std::int64_t n,
                                             bool vec4, std::int64_t b, std::int64_t nb, float scale) {
  const std::int64_t stride = nb * blockDim.x;
  const std::int64_t i0 = b * blockDim.x + threadIdx.x;
  const std::int64_t n4 = vec4 ? n / 4 : 0;
  for (std::int64_t i = i0; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<__half2*>(y)[2 * i] = __floats2half2_rn(v.x * scale, v.y * scale);
    reinterpret_cast<__half2*>(y)[2 * i + 1] = __floats2half2_rn(v.z * scale, v.w * scale);
  }
  for (std::int64_t i = 4 * n4 + i0; i < n; i += stride) y[i] = __float2half_rn(x[i] * scale);
}

struct Copies {
  const float* x[kMaxHalfCopies];
  __half* y[kMaxHalfCopies];
  std::int64_t n[kMaxHalfCopies];
  float scale[kMaxHalfCopies];
  int vec4[kMaxHalfCopies];
  unsigned first[kMaxHalfCopies + 1];  // blocks [first[k], first[k + 1]) convert copy k
  int count;
};

__global__ void to_half_many(const Copies c) {
  int k = 0;
  while (k + 1 < c.count && blockIdx.x >= c.first[k + 1]) ++k;
  to_half_part(c.x[k], c.y[k], c.n[k], c.vec4[k] != 0, blockIdx.x - c.first[k], c.first[k + 1] - c.first[k],
               c.scale[k]);
}

// Blocks for one copy of n elements: one 4-element group (or element) per thread, at most 4096 blocks.
std::int64_t blocks_for_copy(std::int64_t n, bool vec4) {
  const std::int64_t work = vec4 ? n / 4 + 3 : n;
  return std::min<std::int64_t>((work + kThreads - 1) / kThreads, 4096);
}

}  // namespace

void convert_to_half(std::initializer_list<HalfCopy> copies, cudaStream_t stream) {
  if (copies.size() > static_cast<std::size_t>(kMaxHalfCopies))
    throw Error("convert_to_half", "more than kMaxHalfCopies copies in one launch");
  Copies c{};
  unsigned blocks = 0;
  for (const HalfCopy& h : copies) {
    if (h.n <= 0) continue;
    const bool vec4 = aligned16(h.x);
    c.x[c.count] = h.x, c.y[c.count] = h.y, c.n[c.count] = h.n, c.scale[c.count] = h.scale, c.vec4[c.count] = vec4;
    c.first[c.count] = blocks;
    blocks += static_cast<unsigned>(blocks_for_copy(h.n, vec4));
    ++c.count;
  }
  if (c.count == 0) return;
  c.first[c.count] = blocks;
  to_half_many<<<blocks, kThreads, 0, stream>>>(c);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

void convert_to_half(const float* x, __half* y, std::int64_t n, cudaStream_t stream) {
  convert_to_half({{x, y, n}}, stream);
}

void gemm(Context& ctx, int slot, cudaStream_t stream, cublasComputeType_t fp32_compute, Gemm g, Operand A,
          Operand B, float* C) {
  g.a_type = A.t, g.b_type = B.t, g.c_type = CUDA_R_32F;
  g.compute = A.t == CUDA_R_16F ? CUBLAS_COMPUTE_32F : fp32_compute;
  gemm(ctx, slot, stream, g, A.p, B.p, C);
}

void gemm_half(Context& ctx, int slot, cudaStream_t stream, Gemm g, const __half* A, const __half* B, __half* C) {
  g.a_type = g.b_type = g.c_type = CUDA_R_16F;
  g.compute = CUBLAS_COMPUTE_32F;
  gemm(ctx, slot, stream, g, A, B, C);
}

bool fp16_gemms() { return env_switch("ATTNBWD_CUDA_FP32_GEMM", {"auto", "fp16", "tf32"}) != 2; }

}  // namespace attnbwd::cuda
