#include "convert.hpp"

#include <algorithm>

#include "check.hpp"
#include "switches.hpp"

namespace attnbwd::cuda {
namespace {

__global__ void to_half(const float* __restrict__ x, __half* __restrict__ y, std::int64_t n, bool vec4) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t n4 = vec4 ? n / 4 : 0;
  for (std::int64_t i = i0; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<__half2*>(y)[2 * i] = __floats2half2_rn(v.x, v.y);
    reinterpret_cast<__half2*>(y)[2 * i + 1] = __floats2half2_rn(v.z, v.w);
  }
  for (std::int64_t i = 4 * n4 + i0; i < n; i += stride) y[i] = __float2half_rn(x[i]);
}

}  // namespace

void convert_to_half(const float* x, __half* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const int threads = 256;
  const bool vec4 = aligned16(x);
  const std::int64_t work = vec4 ? n / 4 + 3 : n;
  const std::int64_t blocks = std::min<std::int64_t>((work + threads - 1) / threads, 4096);
  to_half<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(x, y, n, vec4);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

void gemm(Context& ctx, int slot, cudaStream_t stream, cublasComputeType_t fp32_compute, Gemm g, Operand A,
          Operand B, float* C) {
  g.a_type = A.t, g.b_type = B.t, g.c_type = CUDA_R_32F;
  g.compute = A.t == CUDA_R_16F ? CUBLAS_COMPUTE_32F : fp32_compute;
  gemm(ctx, slot, stream, g, A.p, B.p, C);
}

bool fp16_gemms() { return env_switch("ATTNBWD_CUDA_FP32_GEMM", {"auto", "fp16", "tf32"}) != 2; }

}  // namespace attnbwd::cuda
