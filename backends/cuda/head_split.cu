#include "head_split.hpp"

#include <string>

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

struct PadJobs {
  PadHeads c[kMaxPadHeads];
  unsigned n_vec[kMaxPadHeads];      // 16-byte groups of tensor k: B·H·S8·D/8
  unsigned first[kMaxPadHeads + 1];  // blocks [first[k], first[k + 1]) copy tensor k
  int n;
};

constexpr int kPadThreads = 256;

// One 16-byte group of 8 head-dim elements per thread; 32-bit indices (pad_heads checks they fit).
__global__ void pad_heads_kernel(const PadJobs j, unsigned S, unsigned S8, unsigned D8) {
  int k = 0;
  while (k + 1 < j.n && blockIdx.x >= j.first[k + 1]) ++k;
  const PadHeads& c = j.c[k];
  const unsigned v = (blockIdx.x - j.first[k]) * kPadThreads + threadIdx.x;
  if (v >= j.n_vec[k]) return;
  const unsigned d8 = v % D8, row = v / D8;  // row of [B·H·S8]
  const unsigned s = row % S8, bh = row / S8;
  const unsigned H = static_cast<unsigned>(c.H), h = bh % H, b = bh / H;
  uint4 x = make_uint4(0, 0, 0, 0);
  if (s < S) x = *reinterpret_cast<const uint4*>(c.src + b * c.sb + s * c.ss + h * c.sh + d8 * 8);
  *reinterpret_cast<uint4*>(c.dst + static_cast<std::int64_t>(v) * 8) = x;
}

struct HeadOperands {
  HeadOperand op[3];
};

__global__ void head_pointers_kernel(const HeadOperands ops, std::int64_t B, std::int64_t H, void** out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, n = B * H;
  if (i >= n) return;
  const std::int64_t b = i / H, h = i % H;
  for (int k = 0; k < 3; ++k)
    out[k * n + i] = const_cast<__nv_bfloat16*>(ops.op[k].base + b * ops.op[k].sb + h * ops.op[k].sh);
}

}  // namespace

void head_pointers(const HeadOperand (&ops)[3], std::int64_t B, std::int64_t H, void** out, cudaStream_t stream) {
  const std::int64_t n = B * H;
  if (n <= 0) return;
  const int threads = 256;
  head_pointers_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream>>>(
      HeadOperands{{ops[0], ops[1], ops[2]}}, B, H, out);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

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

void pad_heads(const PadHeads* copies, int n, std::int64_t B, std::int64_t S, std::int64_t S8, std::int64_t D,
               cudaStream_t stream) {
  if (n < 1 || n > kMaxPadHeads) throw Error("pad_heads: 1 to " + std::to_string(kMaxPadHeads) + " tensors");
  PadJobs j{};
  j.n = n;
  std::int64_t blocks = 0;
  for (int k = 0; k < n; ++k) {
    j.c[k] = copies[k];
    const std::int64_t vec = B * copies[k].H * S8 * (D / 8);
    if (vec >= (std::int64_t{1} << 32) - kPadThreads) throw Error("pad_heads: tensor too large for 32-bit indices");
    j.n_vec[k] = static_cast<unsigned>(vec);
    j.first[k] = static_cast<unsigned>(blocks);
    blocks += (vec + kPadThreads - 1) / kPadThreads;
  }
  j.first[n] = static_cast<unsigned>(blocks);
  if (blocks == 0) return;
  pad_heads_kernel<<<static_cast<unsigned>(blocks), kPadThreads, 0, stream>>>(
      j, static_cast<unsigned>(S), static_cast<unsigned>(S8), static_cast<unsigned>(D / 8));
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
