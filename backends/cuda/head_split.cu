#include "head_split.hpp"

#include "check.hpp"

namespace attnbwd::cuda {
namespace {

template <int Vec>
__global__ void head_split_kernel(const __nv_bfloat16* __restrict__ g, __nv_bfloat16* __restrict__ out,
                                  std::int64_t S, std::int64_t H, std::int64_t D, std::int64_t n_vec) {
  const std::int64_t v = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n_vec) return;
  const std::int64_t per_row = H * D / Vec;
  const std::int64_t t = v / per_row, col = (v % per_row) * Vec;
  const std::int64_t b = t / S, s = t % S, h = col / D, d = col % D;
  const std::int64_t dst = ((b * H + h) * S + s) * D + d;
  if constexpr (Vec == 8) {
    *reinterpret_cast<uint4*>(out + dst) = *reinterpret_cast<const uint4*>(g + t * H * D + col);
  } else {
    out[dst] = g[t * H * D + col];
  }
}

}  // namespace

void head_split(const __nv_bfloat16* g, __nv_bfloat16* out, std::int64_t T, std::int64_t S, std::int64_t H,
                std::int64_t D, cudaStream_t stream) {
  const int threads = 256;
  if (D % 8 == 0 && aligned16(g) && aligned16(out)) {
    const std::int64_t n = T * H * D / 8;
    head_split_kernel<8><<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(g, out, S, H, D, n);
  } else {
    const std::int64_t n = T * H * D;
    head_split_kernel<1><<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(g, out, S, H, D, n);
  }
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
