// Kernels of vision_mha_norm_backward's CUDA fast path: head split/merge, softmax backward rows,
// LayerNorm backward + residual, and the fixed-order column sums (see the .cuh for the contracts).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "check.hpp"
#include "sizes.hpp"
#include "dispatch.hpp"
#include "switches.hpp"
#include "vision_mha_norm_backward_kernels.cuh"

namespace attnbwd::cuda::mha {
namespace {

using std::int64_t;
constexpr int kThreads = 256;

// Butterfly sum: every lane ends with the same bits (each step adds the same two values, commutatively).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int VEC>
__device__ __forceinline__ void load(const float* p, float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = p[i];
  }
}
template <int VEC>
__device__ __forceinline__ void store(float* p, const float (&v)[VEC]) {
  if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) p[i] = v[i];
  }
}

__global__ void head_split_kernel(const float4* __restrict__ dA, float4* __restrict__ dO, int64_t S, int64_t H,
                                  int64_t D4, int64_t n_vec) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n_vec) return;
  const int64_t E4 = H * D4;
  const int64_t t = v / E4, c = v - t * E4, h = c / D4, d = c - h * D4, b = t / S, s = t - b * S;
  dO[((b * H + h) * S + s) * D4 + d] = dA[v];
}

// One warp per row. MAXN > 0: the row (≤ 32·MAXN long) stays in registers; 0: read twice.
template <int MAXN>
__global__ void softmax_backward_rows(const float* __restrict__ P, float* __restrict__ ds, int64_t rows, int64_t S,
                                      int64_t ld) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const float* p = P + row * S;
  float* d = ds + row * ld;
  float r = 0.0f;
  if constexpr (MAXN > 0) {
    float pv[MAXN], dv[MAXN];
#pragma unroll
    for (int k = 0; k < MAXN; ++k) {
      const int64_t j = lane + 32 * k;
      pv[k] = 0.0f, dv[k] = 0.0f;
      if (j < S) pv[k] = p[j], dv[k] = d[j];
      r = fmaf(pv[k], dv[k], r);
    }
    r = warp_sum(r);
#pragma unroll
    for (int k = 0; k < MAXN; ++k) {
      const int64_t j = lane + 32 * k;
      if (j < S) d[j] = pv[k] * (dv[k] - r);
    }
  } else {
    for (int64_t j = lane; j < S; j += 32) r = fmaf(p[j], d[j], r);
    r = warp_sum(r);
    for (int64_t j = lane; j < S; j += 32) d[j] = p[j] * (d[j] - r);
  }
}

// Block x handles tokens [x·tpb, min(N, (x+1)·tpb)); each thread owns float4 columns of dQKV.
__global__ void merge_heads_kernel(const float* __restrict__ dq, const float* __restrict__ dk,
                                   const float* __restrict__ dv, float* __restrict__ dqkv,
                                   float* __restrict__ partial, int64_t N, int64_t S, int64_t H, int64_t D,
                                   int64_t tpb) {
  const int64_t E = H * D, E3 = 3 * E;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tpb, t1 = t0 + tpb < N ? t0 + tpb : N;
  for (int64_t c = 4 * static_cast<int64_t>(threadIdx.x); c < E3; c += 4 * blockDim.x) {
    const int64_t part = c / E, w = c - part * E, h = w / D, d = w - h * D;
    const float* src = part == 0 ? dq : (part == 1 ? dk : dv);
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / S, s = t - b * S;
      const float4 x = *reinterpret_cast<const float4*>(src + ((b * H + h) * S + s) * D + d);
      *reinterpret_cast<float4*>(dqkv + t * E3 + c) = x;
      acc.x += x.x, acc.y += x.y, acc.z += x.z, acc.w += x.w;
    }
    *reinterpret_cast<float4*>(partial + static_cast<int64_t>(blockIdx.x) * E3 + c) = acc;
  }
}

// Thread i owns columns (i + k·blockDim.x)·VEC + [0, VEC) for k < MAXV (those below E).
template <int VEC, int MAXV>
__global__ void __launch_bounds__(kThreads) layer_norm_backward_kernel(
    const float* __restrict__ dxn, const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ var, const float* __restrict__ gamma, const float* __restrict__ dy,
    float* __restrict__ grad_x, float* __restrict__ partial, int64_t N, int64_t E, float eps, int64_t tpb) {
  __shared__ float red[2][2][kThreads / 32];  // [token parity][sum][warp]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nwarps = blockDim.x / 32;
  const float inv_e = 1.0f / static_cast<float>(E);
  int64_t col[MAXV];
  bool ok[MAXV];
  float gam[MAXV][VEC], acc_w[MAXV][VEC], acc_b[MAXV][VEC], acc_o[MAXV][VEC];
#pragma unroll
  for (int k = 0; k < MAXV; ++k) {
    col[k] = (static_cast<int64_t>(threadIdx.x) + static_cast<int64_t>(k) * blockDim.x) * VEC;
    ok[k] = col[k] < E;
#pragma unroll
    for (int i = 0; i < VEC; ++i) gam[k][i] = 0.0f, acc_w[k][i] = 0.0f, acc_b[k][i] = 0.0f, acc_o[k][i] = 0.0f;
    if (ok[k]) load<VEC>(gamma + col[k], gam[k]);
  }
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tpb, t1 = t0 + tpb < N ? t0 + tpb : N;
  for (int64_t t = t0; t < t1; ++t) {
    const int parity = static_cast<int>((t - t0) & 1);
    const float sigma = sqrtf(var[t] + eps), m = mean[t];
    float gs[MAXV][VEC], xc[MAXV][VEC];
    float s_gs = 0.0f, s_gxc = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXV; ++k) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) gs[k][i] = 0.0f, xc[k][i] = 0.0f;
      if (!ok[k]) continue;
      float g[VEC], xv[VEC];
      load<VEC>(dxn + t * E + col[k], g);
      load<VEC>(x + t * E + col[k], xv);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        xc[k][i] = xv[i] - m;
        acc_w[k][i] += g[i] * (xc[k][i] / sigma);
        acc_b[k][i] += g[i];
        const float ge = g[i] * gam[k][i];
        gs[k][i] = ge / sigma;
        s_gs += gs[k][i];
        s_gxc += ge * xc[k][i];
      }
    }
    s_gs = warp_sum(s_gs);
    s_gxc = warp_sum(s_gxc);
    if (lane == 0) red[parity][0][warp] = s_gs, red[parity][1][warp] = s_gxc;
    // One barrier per token: a warp writes red[parity ^ 1] for the next token only after this
    // barrier, which every warp reaches after reading red[parity ^ 1] for the previous token.
    __syncthreads();
    float sum_gs = 0.0f, sum_gxc = 0.0f;
    for (int w = 0; w < nwarps; ++w) sum_gs += red[parity][0][w], sum_gxc += red[parity][1][w];
    const float mean_gs = sum_gs * inv_e;
    const float quirk = (sum_gxc * inv_e) / (sigma * sigma);  // σ², as the reference (not σ³)
#pragma unroll
    for (int k = 0; k < MAXV; ++k) {
      if (!ok[k]) continue;
      float d[VEC], out[VEC];
      load<VEC>(dy + t * E + col[k], d);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        out[i] = d[i] + (gs[k][i] - mean_gs - xc[k][i] * quirk);
        acc_o[k][i] += d[i];
      }
      store<VEC>(grad_x + t * E + col[k], out);
    }
  }
  float* pw = partial + static_cast<int64_t>(blockIdx.x) * 3 * E;
#pragma unroll
  for (int k = 0; k < MAXV; ++k) {
    if (!ok[k]) continue;
    store<VEC>(pw + col[k], acc_w[k]);
    store<VEC>(pw + E + col[k], acc_b[k]);
    store<VEC>(pw + 2 * E + col[k], acc_o[k]);
  }
}

// The same contract with one warp per token (E = 128·V4): lane l owns the float4 columns (l + 32k)·4,
// k < V4, so a token's two row sums are warp shuffles (no barrier per token) and the 8 warps of a block
// work on 8 tokens at once (warp w: tokens t0 + w, t0 + w + 8, ...). The per-warp column sums are added
// across warps in warp order at the end. Needs 16-byte aligned rows (the float4 path's condition).
// Rcp: x̂ and dXn⊙γ/σ as products with one reciprocal of σ per token instead of two IEEE divisions per
// element (64 per lane and token at E = 1024; a division is a ~10-instruction sequence): within 1-2 ulp
// of the quotients. ncu of the division form (#8): 11.6 cycles per issued instruction, ~1,300 instructions
// per token and warp.
// Pre: the same arithmetic (the same bits) with the loads reordered: the token's σ² and mean are loaded one token
// ahead, and its dY row is loaded with its dXn and x rows, so a token costs one DRAM round trip instead of three
// (ncu of the rcp form on #8: its stalls sit at the first uses of var, of the dXn/x rows and of the dY row).
template <int V4, bool Rcp, bool Pre = false>
__global__ void __launch_bounds__(kThreads) layer_norm_backward_warps(
    const float* __restrict__ dxn, const float* __restrict__ x, const float* __restrict__ mean,
    const float* __restrict__ var, const float* __restrict__ gamma, const float* __restrict__ dy,
    float* __restrict__ grad_x, float* __restrict__ partial, int64_t N, float eps, int64_t tpb) {
  constexpr int E = 128 * V4, kWarps = kThreads / 32;
  __shared__ float4 red[kWarps][E / 4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const float inv_e = 1.0f / static_cast<float>(E);
  float acc[3][V4][4];  // Σ dXn⊙x̂, Σ dXn, Σ dY over this warp's tokens
#pragma unroll
  for (int s = 0; s < 3; ++s)
#pragma unroll
    for (int k = 0; k < V4; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[s][k][i] = 0.0f;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tpb, t1 = t0 + tpb < N ? t0 + tpb : N;
  float var_next = 0.0f, mean_next = 0.0f;  // Pre: the next token's
  if (Pre && t0 + warp < t1) var_next = var[t0 + warp], mean_next = mean[t0 + warp];
  for (int64_t t = t0 + warp; t < t1; t += kWarps) {
    float dyv[Pre ? V4 : 1][4];
    if constexpr (Pre) {
#pragma unroll
      for (int k = 0; k < V4; ++k) load<4>(dy + t * E + (lane + 32 * k) * 4, dyv[k]);
    }
    const float var_t = Pre ? var_next : var[t], m = Pre ? mean_next : mean[t];
    if (Pre && t + kWarps < t1) var_next = var[t + kWarps], mean_next = mean[t + kWarps];
    const float sigma = sqrtf(var_t + eps);
    const float inv_sigma = 1.0f / sigma;  // Rcp only
    float gs[V4][4], xc[V4][4];
    float s_gs = 0.0f, s_gxc = 0.0f;
#pragma unroll
    for (int k = 0; k < V4; ++k) {
      const int col = (lane + 32 * k) * 4;
      float g[4], xv[4], gam[4];
      load<4>(dxn + t * E + col, g);
      load<4>(x + t * E + col, xv);
      load<4>(gamma + col, gam);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        xc[k][i] = xv[i] - m;
        acc[0][k][i] += g[i] * (Rcp ? xc[k][i] * inv_sigma : xc[k][i] / sigma);
        acc[1][k][i] += g[i];
        const float ge = g[i] * gam[i];
        gs[k][i] = Rcp ? ge * inv_sigma : ge / sigma;
        s_gs += gs[k][i];
        s_gxc += ge * xc[k][i];
      }
    }
    const float mean_gs = warp_sum(s_gs) * inv_e;
    const float quirk = (warp_sum(s_gxc) * inv_e) / (sigma * sigma);  // σ², as the reference (not σ³)
#pragma unroll
    for (int k = 0; k < V4; ++k) {
      const int col = (lane + 32 * k) * 4;
      float d[4], out[4];
      if constexpr (Pre) {
#pragma unroll
        for (int i = 0; i < 4; ++i) d[i] = dyv[k][i];
      } else {
        load<4>(dy + t * E + col, d);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        out[i] = d[i] + (gs[k][i] - mean_gs - xc[k][i] * quirk);
        acc[2][k][i] += d[i];
      }
      store<4>(grad_x + t * E + col, out);
    }
  }
  float* pw = partial + static_cast<int64_t>(blockIdx.x) * 3 * E;
#pragma unroll
  for (int s = 0; s < 3; ++s) {
#pragma unroll
    for (int k = 0; k < V4; ++k) red[warp][lane + 32 * k] = make_float4(acc[s][k][0], acc[s][k][1], acc[s][k][2], acc[s][k][3]);
    __syncthreads();
    for (int c4 = threadIdx.x; c4 < E / 4; c4 += kThreads) {
      float4 sum = red[0][c4];
      for (int w = 1; w < kWarps; ++w) {
        const float4 v = red[w][c4];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      *reinterpret_cast<float4*>(pw + s * E + 4 * c4) = sum;
    }
    __syncthreads();
  }
}

// Block: 32 columns × kSumGroups row groups; group g adds rows g, g + kSumGroups, ... in double, then
// the groups' sums are added in group order. Fixed order: the same bits on every run.
constexpr int kSumGroups = kThreads / 32;
__global__ void __launch_bounds__(kThreads) sum_partials_kernel(const float* __restrict__ partial, int64_t chunks,
                                                                int64_t width, int64_t seg, float* out0,
                                                                float* out1, float* out2) {
  __shared__ double part[kSumGroups][32];
  const int cx = threadIdx.x % 32, grp = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + cx;
  double s = 0.0;
  if (c < width)
    for (int64_t j = grp; j < chunks; j += kSumGroups) s += partial[j * width + c];
  part[grp][cx] = s;
  __syncthreads();
  if (grp != 0 || c >= width) return;
  double total = part[0][cx];
  for (int g = 1; g < kSumGroups; ++g) total += part[g][cx];
  const int64_t which = c / seg;
  float* out = which == 0 ? out0 : (which == 1 ? out1 : out2);
  out[c - which * seg] = static_cast<float>(total);
}

}  // namespace

void head_split(const float* dA, float* dO, int64_t B, int64_t S, int64_t H, int64_t D, cudaStream_t stream) {
  const int64_t n_vec = B * S * H * D / 4;
  head_split_kernel<<<blocks_for(n_vec, kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(dA), reinterpret_cast<float4*>(dO), S, H, D / 4, n_vec);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

void softmax_backward(const float* P, float* ds, int64_t rows, int64_t S, int64_t ld, cudaStream_t stream) {
  const int rows_per_block = kThreads / 32;
  const unsigned grid = blocks_for(rows, rows_per_block);
  if (S <= 128)
    softmax_backward_rows<4><<<grid, kThreads, 0, stream>>>(P, ds, rows, S, ld);
  else if (S <= 320)
    softmax_backward_rows<10><<<grid, kThreads, 0, stream>>>(P, ds, rows, S, ld);
  else if (S <= 640)
    softmax_backward_rows<20><<<grid, kThreads, 0, stream>>>(P, ds, rows, S, ld);
  else
    softmax_backward_rows<0><<<grid, kThreads, 0, stream>>>(P, ds, rows, S, ld);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

int64_t tokens_per_block(int64_t tokens, int sm_count) {
  const int64_t blocks = 2 * static_cast<int64_t>(std::max(sm_count, 1));
  return std::clamp<int64_t>((tokens + blocks - 1) / blocks, 1, 64);
}

void merge_heads(const float* dq, const float* dk, const float* dv, float* dqkv, float* partial, int64_t B,
                 int64_t S, int64_t H, int64_t D, int64_t tpb, cudaStream_t stream) {
  const int64_t N = B * S;
  merge_heads_kernel<<<blocks_for(N, static_cast<int>(tpb)), kThreads, 0, stream>>>(dq, dk, dv, dqkv, partial, N,
                                                                                     S, H, D, tpb);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

int64_t layer_norm_max_blocks(int64_t N, int sm_count) {
  const int64_t tpb = tokens_per_block(N, sm_count);
  return std::max<int64_t>((N + tpb - 1) / tpb, std::max(sm_count, 1));
}

int64_t layer_norm_backward(const float* dxn, const float* x, const float* mean, const float* var, const float* gamma,
                            const float* dy, float* grad_x, float* partial, int64_t N, int64_t E, float eps,
                            int sm_count, cudaStream_t stream) {
  // float4 rows need 16-byte row starts: E % 4 == 0 and every base aligned (the scratch always is).
  const bool vec4 = E % 4 == 0 && aligned16(dxn) && aligned16(x) && aligned16(gamma) && aligned16(dy) &&
                    aligned16(grad_x) && aligned16(partial);
  // ATTNBWD_CUDA_MHA_LN=auto|block|rcp|div|pre: the warp-per-token kernel where E = 128·V4 (V4 ≤ 8) with one
  // reciprocal of σ per token and its loads ahead (auto = pre: rcp's bits), or without the loads ahead (rcp), or
  // the block-per-token one (block), or the warp-per-token kernel with two IEEE divisions per element (div, the
  // form before rcp). A/B timing. Measured on an H200 (2026-12-01, perf/NOTES.md): rcp against div 1.020-1.058x per
  // call on 15 of 16 workloads (geomean 1.035x), the kernel 115 -> 63 us on #8 (eighth session); pre against rcp
  // (twelfth session, ncu) #8 66.0 -> 63.4 µs, #13 152.1 -> 150.1, #10 8.3 -> 8.0, whole op 1.004x geomean (within
  // the noise), outputs byte-identical.
  const int ln = env_switch("ATTNBWD_CUDA_MHA_LN", {"auto", "block", "rcp", "div", "pre"});
  const bool warps = vec4 && E % 128 == 0 && E / 128 <= 8 && ln != 1;
  if (warps) {
    // One block per SM at most (239 registers × 256 threads at E = 1024), a multiple of 8 tokens each.
    const int64_t sms = std::max(sm_count, 1), per = (N + sms - 1) / sms;
    const int64_t tpb = std::max<int64_t>(8, (per + 7) / 8 * 8), blocks = (N + tpb - 1) / tpb;
    const auto run = [&](auto v4) {
      constexpr int V4 = decltype(v4)::value;
      if (ln == 4 || ln == 0)
        layer_norm_backward_warps<V4, true, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            dxn, x, mean, var, gamma, dy, grad_x, partial, N, eps, tpb);
      else if (ln != 3)
        layer_norm_backward_warps<V4, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            dxn, x, mean, var, gamma, dy, grad_x, partial, N, eps, tpb);
      else
        layer_norm_backward_warps<V4, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
            dxn, x, mean, var, gamma, dy, grad_x, partial, N, eps, tpb);
    };
    dispatch_int<8, 8>(static_cast<int>(E / 128), run);  // E / 128 is 1..8 here
    ATTNBWD_CUDA_CHECK_LAUNCH();
    return blocks;
  }
  const int64_t tpb = tokens_per_block(N, sm_count), blocks = (N + tpb - 1) / tpb;
  const unsigned grid = static_cast<unsigned>(blocks);
  if (vec4)
    layer_norm_backward_kernel<4, 4><<<grid, kThreads, 0, stream>>>(dxn, x, mean, var, gamma, dy, grad_x, partial,
                                                                     N, E, eps, tpb);
  else
    layer_norm_backward_kernel<1, 16><<<grid, kThreads, 0, stream>>>(dxn, x, mean, var, gamma, dy, grad_x,
                                                                      partial, N, E, eps, tpb);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  return blocks;
}

void sum_partials(const float* partial, int64_t chunks, int64_t width, int64_t seg, float* out0, float* out1,
                  float* out2, cudaStream_t stream) {
  sum_partials_kernel<<<blocks_for(width, 32), kThreads, 0, stream>>>(partial, chunks, width, seg, out0, out1,
                                                                            out2);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda::mha
