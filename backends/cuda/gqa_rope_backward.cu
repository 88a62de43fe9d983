// gqa_rope_backward on the CUDA fast path (spec §3), v1.
//
// Stages, all on the caller's stream unless noted (every one deterministic: no atomics anywhere):
//  1. dA = bf16(dY·Wo) (cuBLASLt; the thin kernel's dX-only form by name, ATTNBWD_CUDA_GQA_DA); grad_o_weight =
//     bf16(dYᵀ·A) on the side stream after dA, under steps 3-5 (ATTNBWD_CUDA_GQA_DWO; early: from the op's start).
//  2. head split dA [T, Hq·D] -> dO [B, Hq, S, D]; for B = 1 (S % 8 == 0) the attention GEMMs read dA as a
//     strided view instead (ATTNBWD_CUDA_GQA_DO); on sm_90 from S = 256 (and with ATTNBWD_CUDA_GQA_DA=heads) step 1
//     writes dO itself, one cuBLASLt pointer-array batch of B·Hq GEMMs, and no copy runs. Where S % 8 != 0 the
//     attention buffers have S8 = S rounded up to 8 rows per head (ATTNBWD_CUDA_GQA_PAD): dO, Q, K, V copied with zero
//     pad rows in one launch.
//     With ATTNBWD_CUDA_GQA_PROJ=sm90 (sm_90 only) both steps are one launch of linear_backward_sm90.cu
//     writing dO directly, and so are the three projection pairs of step 7 (slower today: they lose
//     the side-stream overlap; perf/NOTES.md).
//  3. dP = bf16(dO·Vᵀ) per (b, h) into the dS buffer: a strided-batched cuBLASLt GEMM + a row kernel
//     for step 4 (default), or a fused tensor-core kernel (mma.sync, gqa_rope_backward_attn.cu) doing
//     both, opt-in with ATTNBWD_GQA_FUSED=1 while it is slower (perf/NOTES.md).
//  4. softmax backward, fp32 on upcast P and dP: r = Σ P·dP; dS = bf16(bf16(P⊙(dP − r))·scaling); one warp
//     per row held in registers (S8 ≤ 2048); with padding it also writes P's padded copy for dV₃₂.
//  5. dV₃₂ = bf16(Pᵀ·dO), dQ = bf16(dS·K), dK₃₂ = bf16(dSᵀ·Q): strided-batched cuBLASLt (from 513 tokens dK and dV
//     per KV head, summed over its group by the GEMM: ATTNBWD_CUDA_GQA_GROUP); dV₃₂ (under
//     steps 3-4, or after them with padding) and dK₃₂ (under dQ) on the side stream unless
//     ATTNBWD_CUDA_GQA_OVERLAP=off; with padding dK₃₂ and dV₃₂ are one strided batch, one launch
//     (ATTNBWD_CUDA_GQA_DKDV, auto).
//  3-5 instead, key-major on sm_90 (ATTNBWD_CUDA_GQA_ATTN; auto where S ≥ 1024 and T ≤ 4096): O = bf16(P·V)
//     (cuBLASLt) and r = Σ dO⊙O, then one wgmma kernel (gqa_rope_backward_attn_sm90.cu; warp-specialised with a
//     TMA producer where S % 128 == 0) that reads P once, keeps dP in registers, writes dSᵀ once and accumulates
//     dK₃₂ and dV₃₂, then dQ = (dSᵀ)ᵀ·K (cuBLASLt). In the warp-specialised form (S % 128 == 0) by default
//     (ATTNBWD_CUDA_GQA_KVDQ): r and dQ first, by one query-major pass over P (dQ = scaling·((P⊙dP)·K − r·(P·K)),
//     no O, no dS), then the kernel without its dSᵀ and no dQ GEMM.
//  6. GQA sums (fp32 over the group's bf16 dK₃₂/dV₃₂, one rounding), RoPE backward (each product
//     rounded, then the sum), head merge into one [T, Hq·D + 2·Hkv·D] buffer dQKVp: one pass, or on the small
//     attention path the two kernels' epilogues (ATTNBWD_CUDA_GQA_MERGE; the same bits).
//  7. grad_{q,k,v}_weight = bf16(dXpᵀ·Xh) on the side stream; dXq into grad_hidden_states on the main stream, then
//     dXk and dXv added into it by cuBLASLt's C operand: bf16(bf16(acc_v) + bf16(bf16(acc_k) + bf16(acc_q))) (cuBLASLt's
//     bf16 epilogue rounds the product before it adds C: the reference's rounding points)
//     (ATTNBWD_CUDA_GQA_DXSUM; add3: dXk, dXv as bf16 scratch and the reference's bf16(bf16(dXq + dXk) + dXv)
//     by one pass, as with the sm_90a pairs of ATTNBWD_CUDA_GQA_PROJ=sm90). On sm_90
//     (ATTNBWD_CUDA_GQA_QKV, auto) all of it is one launch where T ≤ 384: the thin-T kernel (linear_thin_sm90.cu)
//     for 128 ≤ T ≤ 256, else the grouped launch of linear_backward_sm90.cu; either way grad_hidden_states is one
//     fp32 sum over the q, k and v columns with one rounding (not three: within the spec's tolerance, and closer
//     to the exact sum than the reference's).
// Every GEMM is fp32-accumulated with one rounding of its bf16 result, as the reference's.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>

#include "check.hpp"
#include "sizes.hpp"
#include "context.hpp"
#include "gqa_rope_backward_attn.hpp"
#include "head_split.hpp"
#include "graph_key.hpp"
#include "griddep.cuh"
#include "gqa_rope_pair.cuh"
#include "cuda_backend.hpp"
#include "dispatch.hpp"
#include "linear_backward_sm90.hpp"
#include "linear_thin_sm90.hpp"
#include "lt_gemm.hpp"
#include "stages.hpp"
#include "switches.hpp"
#include "wgrad_small_k_sm90.hpp"

namespace attnbwd::cuda {
namespace {

using std::int64_t;
using bf = __nv_bfloat16;

__device__ __forceinline__ float f32(bf x) { return __bfloat162float(x); }
__device__ __forceinline__ bf rn(float x) { return __float2bfloat16_rn(x); }
// bf16 tensor op in PyTorch's opmath: fp32 result, one rounding; returned as the rounded float.
__device__ __forceinline__ float r16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// ---------------------------------------------------------------------------------------------
// Small kernels.

// Softmax backward, one warp per row of one (b, h): ds holds bf16 dP on entry, the scaled dS on exit.
// r = Σ P·dP in fp32 (products of two bf16 are exact), summed by each lane over its columns in order, then
// across the warp in a fixed order. One element per lane and step: the fallback for P rows that are not
// 16-byte aligned on the unpadded path (rows of stride S, dS rows of stride ld).
__global__ void softmax_backward_rows_scalar(const bf* __restrict__ P, bf* __restrict__ ds, int64_t rows, int64_t S,
                                             int64_t ld, float scaling) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const bf* p = P + row * S;
  bf* d = ds + row * ld;
  float r = 0.0f;
  for (int64_t j = lane; j < S; j += 32) r += f32(p[j]) * f32(d[j]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) r += __shfl_xor_sync(0xffffffffu, r, o);
  for (int64_t j = lane; j < S; j += 32) d[j] = rn(r16(f32(p[j]) * (f32(d[j]) - r)) * scaling);
}

// The same math with 16-byte moves: each lane takes 8 consecutive columns of every 256-column chunk of the
// row, in chunk order (so r sums in the same order for every NC). NC > 0: the row's NC chunks (S8 ≤ 256·NC)
// are loaded once and kept in registers — one read and one write of each element, all of a lane's loads in
// flight together; NC = 0: two passes over the row (any length; the second re-reads).
// Pad = false: S % 8 == 0 and P 16-byte aligned; rows of [BH, S], S8 = S, p_pad unused.
// Pad = true (the S % 8 != 0 path): rows of [BH, S8]; P's rows are S long and start at any even byte (8
// element loads per chunk); rows s < S also copy their P row into p_pad with zeros in columns S..S8, rows
// S ≤ s < S8 write a zero row of p_pad. dS's own pad rows and columns are the dP GEMM's zeros (products with
// the zero rows of dO and V in their padded copies) and are left as they are.
// R: rows per warp (consecutive), one after the other, each warp prefetching row k + 1's P and dP into L2 before it
// loads row k (more bytes in flight per SM without registers: where the kernel shares the GPU with a weight-gradient
// GEMM on a part of the SMs, its rate per SM sets its time). The same bits for every R.
template <int NC, bool Pad>
__device__ __forceinline__ void softmax_backward_row16(const bf* __restrict__ P, bf* __restrict__ ds,
                                                       bf* __restrict__ p_pad, int64_t S, int64_t S8, float scaling,
                                                       int64_t row, int lane) {
  const int64_t bh = row / S8, s = row % S8;
  if constexpr (Pad) {
    if (s >= S) {
      bf* pp = p_pad + row * S8;
      for (int64_t j = lane * 8; j < S8; j += 256) *reinterpret_cast<uint4*>(pp + j) = make_uint4(0, 0, 0, 0);
      return;
    }
  }
  const bf* p = P + (bh * S + s) * S;
  bf* d = ds + row * S8;
  const auto load_p = [&](int64_t j) {
    if constexpr (Pad) {
      bf e[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) e[i] = j + i < S ? p[j + i] : rn(0.0f);
      return *reinterpret_cast<const uint4*>(e);
    } else {
      return *reinterpret_cast<const uint4*>(p + j);
    }
  };
  const auto add_products = [](float& r, const uint4& pv, const uint4& dv) {
    const bf* pe = reinterpret_cast<const bf*>(&pv);
    const bf* de = reinterpret_cast<const bf*>(&dv);
#pragma unroll
    for (int e = 0; e < 8; ++e) r += f32(pe[e]) * f32(de[e]);  // pad columns: 0 · 0
  };
  const auto finish = [&](int64_t j, const uint4& pv, uint4 dv, float r) {
    const bf* pe = reinterpret_cast<const bf*>(&pv);
    bf* de = reinterpret_cast<bf*>(&dv);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (!Pad || j + e < S) de[e] = rn(r16(f32(pe[e]) * (f32(de[e]) - r)) * scaling);
    *reinterpret_cast<uint4*>(d + j) = dv;
    if constexpr (Pad) *reinterpret_cast<uint4*>(p_pad + row * S8 + j) = pv;  // P's values, 0 in the pad columns
  };
  float r = 0.0f;
  if constexpr (NC > 0) {
    uint4 pv[NC], dv[NC];
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int64_t j = c * 256 + lane * 8;
      if (j < S8) pv[c] = load_p(j), dv[c] = *reinterpret_cast<const uint4*>(d + j);
    }
#pragma unroll
    for (int c = 0; c < NC; ++c)
      if (c * 256 + lane * 8 < S8) add_products(r, pv[c], dv[c]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) r += __shfl_xor_sync(0xffffffffu, r, o);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int64_t j = c * 256 + lane * 8;
      if (j < S8) finish(j, pv[c], dv[c], r);
    }
  } else {
    for (int64_t j = lane * 8; j < S8; j += 256) add_products(r, load_p(j), *reinterpret_cast<const uint4*>(d + j));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) r += __shfl_xor_sync(0xffffffffu, r, o);
    for (int64_t j = lane * 8; j < S8; j += 256) finish(j, load_p(j), *reinterpret_cast<const uint4*>(d + j), r);
  }
}

__device__ __forceinline__ void prefetch_l2(const void* a) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<std::uint64_t>(a)));
}

// Row `row`'s dP and P (pad rows: neither; they read nothing) into L2: one prefetch per lane and 8-column chunk (the
// chunks' first elements; lane 0 adds P's last element, whose line a misaligned row may not otherwise reach).
template <int NC, bool Pad>
__device__ __forceinline__ void prefetch_row16(const bf* __restrict__ P, const bf* __restrict__ ds, int64_t S,
                                               int64_t S8, int64_t row, int lane) {
  const int64_t bh = row / S8, s = row % S8;
  if (Pad && s >= S) return;
  const bf* p = P + (bh * S + s) * S;
  const bf* d = ds + row * S8;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int64_t j = c * 256 + lane * 8;
    if (j < S8) prefetch_l2(d + j);
    if (j < S) prefetch_l2(p + j);
  }
  if (Pad && lane == 0) prefetch_l2(p + S - 1);
}

// R > 1 (rows of ≤ 768 columns only: NC ≤ 3): registers capped for R = 1's 4 blocks of 256 threads per SM (the
// prefetch's loop otherwise takes 72 registers at NC = 3 with Pad, 3 blocks).
template <int NC, bool Pad, int R>
__global__ void __launch_bounds__(256, R > 1 ? 4 : 1)
    softmax_backward_rows16(const bf* __restrict__ P, bf* __restrict__ ds, bf* __restrict__ p_pad, int64_t BH,
                            int64_t S, int64_t S8, float scaling) {
  static_assert(R == 1 || (NC > 0 && NC <= 3), "rows of more than 768 columns take one row per warp");
  const int lane = threadIdx.x % 32;
  const int64_t rows = BH * S8;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * R;
  if constexpr (R == 1) {
    if (first < rows) softmax_backward_row16<NC, Pad>(P, ds, p_pad, S, S8, scaling, first, lane);
  } else {
#pragma unroll 1
    for (int k = 0; k < R; ++k) {
      const int64_t row = first + k;
      if (row >= rows) return;
      if (k + 1 < R && row + 1 < rows) prefetch_row16<NC, Pad>(P, ds, S, S8, row + 1, lane);
      softmax_backward_row16<NC, Pad>(P, ds, p_pad, S, S8, scaling, row, lane);
    }
  }
}

// ATTNBWD_CUDA_GQA_ROWS=auto|1|2|4|8: softmax_backward_rows16's rows per warp (R above) for rows of at most 768
// columns (NC ≤ 3, where rows16_min_blocks caps R > 1's registers at R = 1's occupancy; the GEMM attention path's rows
// are at most 691 + 5 long); longer rows take 1. auto = 1 until the others are measured.
int rows_per_warp() {
  static constexpr int kRows[] = {1, 1, 2, 4, 8};
  return kRows[env_switch("ATTNBWD_CUDA_GQA_ROWS", {"auto", "1", "2", "4", "8"})];
}

// Launches softmax_backward_rows16 with the row held in registers where S8 ≤ 2048 (NC = S8 / 256 rounded
// up), else the two-pass form; `rows` (rows_per_warp()) rows per warp at NC ≤ 3, else one.
template <bool Pad>
void softmax_rows16(const bf* P, bf* ds, bf* p_pad, int64_t BH, int64_t S, int64_t S8, float scaling, int rows,
                    cudaStream_t stream) {
  const int threads = 256, warps = threads / 32;
  const int nc = static_cast<int>(std::min<int64_t>((S8 + 255) / 256, 9));  // 9 → 0: the two-pass form
  const int R = nc <= 3 ? rows : 1;
  const auto go = [&](auto ncc, auto rc) {
    constexpr int kNc = decltype(ncc)::value, kR = decltype(rc)::value;
    if constexpr (kR == 1 || (kNc > 0 && kNc <= 3)) {
      const unsigned grid = blocks_for(BH * S8, warps * kR);
      softmax_backward_rows16<kNc, Pad, kR><<<grid, threads, 0, stream>>>(P, ds, p_pad, BH, S, S8, scaling);
    }
  };
  dispatch_int<8, 0>(nc, [&](auto ncc) {
    switch (R) {
      case 8: go(ncc, std::integral_constant<int, 8>{}); break;
      case 4: go(ncc, std::integral_constant<int, 4>{}); break;
      case 2: go(ncc, std::integral_constant<int, 2>{}); break;
      default: go(ncc, std::integral_constant<int, 1>{});
    }
  });
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

template <int W>
__device__ __forceinline__ void load_w(const bf* p, float (&x)[W]) {
  if constexpr (W == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const bf* e = reinterpret_cast<const bf*>(&v);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = f32(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) x[i] = f32(p[i]);
  }
}
template <int W>
__device__ __forceinline__ void store_w(bf* p, const bf (&x)[W]) {
  if constexpr (W == 8) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(x);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = x[i];
  }
}

// Steps 6-8, one thread per (token, head slot, W consecutive pairs): dQp (RoPE of every query head), dKp (RoPE of
// the group sum), dVp (group sum) from dq, dk, dv [B, Hq, Sp, D] (Sp ≥ S rows per head: padded or not; with k_summed /
// v_summed dk / dv hold the group sums already, one bf16 per KV head, [B, Hkv, Sp, D]) into out
// [T, ldo] at columns [0, Hq·D), [Hq·D, +Hkv·D), [Hq·D + Hkv·D, +Hkv·D). A thread takes the pairs d0..d0+W-1 and the
// same + D/2 of its slot: W = 8 moves them, their cos and sin as uint4 (needs D % 16 == 0, every pointer 16-byte
// aligned and ldo % 8 == 0); W = 1 one element at a time. The same math in the same order per element either way
// (the same bits). G > 0: the group size Hq / Hkv, the group's loads unrolled (all in flight together); G = 0: any
// group size, one head after another. kKv: the k and v slots only (the key-major path's early half with
// ATTNBWD_CUDA_GQA_KVW=under; its q half is this kernel with Hkv = 0).
template <int W, int G, bool kKv = false>
__global__ void gqa_rope_merge(const bf* __restrict__ dq, const bf* __restrict__ dk, const bf* __restrict__ dv,
                               const bf* __restrict__ cos, const bf* __restrict__ sin, bf* __restrict__ out, int64_t T,
                               int64_t S, int64_t Sp, int Hq, int Hkv, int D, int64_t ldo, bool k_summed,
                               bool v_summed) {
  // The thin q/k/v launch that follows is a programmatic dependent: it may start its prologue (its loads of X and W,
  // which this kernel does not write) once every CTA here is resident, and waits for this grid before reading out.
  griddep_launch_dependents();
  const int half = D / 2, groups = half / W;
  const int per_token = (kKv ? 2 * Hkv : Hq + 2 * Hkv) * groups;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= T * per_token) return;
  const int64_t t = item / per_token;
  const int idx = static_cast<int>(item - t * per_token);
  const int64_t b = t / S, s = t % S;
  const int slot = (kKv ? Hq : 0) + idx / groups, d0 = (idx % groups) * W;
  bf* o = out + t * ldo;
  float g0[W], g1[W];
  bf* dst;
  bool rope = true;
  if (slot < Hq) {
    const bf* g = dq + ((b * Hq + slot) * Sp + s) * D + d0;
    load_w(g, g0);
    load_w(g + half, g1);
    dst = o + slot * D + d0;
  } else {
    const bool is_k = slot < Hq + Hkv;
    const int j = is_k ? slot - Hq : slot - Hq - Hkv;
    const bf* src = is_k ? dk : dv;
#pragma unroll
    for (int i = 0; i < W; ++i) g0[i] = g1[i] = 0.0f;
    if (is_k ? k_summed : v_summed) {  // the group sum, rounded once, by the grouped GEMM
      const bf* g = src + ((b * Hkv + j) * Sp + s) * D + d0;
      load_w(g, g0);
      load_w(g + half, g1);
    } else if constexpr (G > 0) {  // every head's loads first, then the sums in group order
      float x0[G][W], x1[G][W];
#pragma unroll
      for (int gi = 0; gi < G; ++gi) {
        const bf* g = src + ((b * Hq + j * G + gi) * Sp + s) * D + d0;
        load_w(g, x0[gi]);
        load_w(g + half, x1[gi]);
      }
#pragma unroll
      for (int gi = 0; gi < G; ++gi)
#pragma unroll
        for (int i = 0; i < W; ++i) g0[i] += x0[gi][i], g1[i] += x1[gi][i];
    } else {
      const int Gr = Hq / Hkv;
      for (int gi = 0; gi < Gr; ++gi) {
        const bf* g = src + ((b * Hq + j * Gr + gi) * Sp + s) * D + d0;
        float x0[W], x1[W];
        load_w(g, x0);
        load_w(g + half, x1);
#pragma unroll
        for (int i = 0; i < W; ++i) g0[i] += x0[i], g1[i] += x1[i];
      }
    }
    dst = o + static_cast<int64_t>(Hq) * D + (is_k ? 0 : static_cast<int64_t>(Hkv) * D) + j * D + d0;
    if (is_k) {  // (r16 leaves a summed input's bf16 values as they are)
#pragma unroll
      for (int i = 0; i < W; ++i) g0[i] = r16(g0[i]), g1[i] = r16(g1[i]);
    } else {
      rope = false;
    }
  }
  bf o0[W], o1[W];
  if (rope) {
    const bf* c = cos + t * D;
    const bf* sn = sin + t * D;
    float c0[W], c1[W], s0[W], s1[W];
    load_w(c + d0, c0);
    load_w(c + d0 + half, c1);
    load_w(sn + d0, s0);
    load_w(sn + d0 + half, s1);
#pragma unroll
    for (int i = 0; i < W; ++i) rope_pair(g0[i], g1[i], c0[i], c1[i], s0[i], s1[i], o0[i], o1[i]);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) o0[i] = rn(g0[i]), o1[i] = rn(g1[i]);
  }
  store_w(dst, o0);
  store_w(dst + half, o1);
}

// The softmax-backward row term for the key-major attention path: r[bh, q] = Σ_d dO[bh, q, d]·O[bh, q, d] with
// O = bf16(P·V), i.e. Σ_k P·(dO·Vᵀ) reassociated (the reference's Σ_k P·bf16(dP) up to its rounding of dP).
// One warp per row, head_dim 128 (4 elements per lane), summed in a fixed order: the same bits every run.
__global__ void row_dot128(const bf* __restrict__ dO, int64_t do_ld, int64_t do_head, const bf* __restrict__ O,
                           float* __restrict__ r, int64_t rows, int64_t S) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t bh = row / S, q = row % S;
  const uint2 a = *reinterpret_cast<const uint2*>(dO + bh * do_head + q * do_ld + lane * 4);
  const uint2 o = *reinterpret_cast<const uint2*>(O + row * 128 + lane * 4);
  const bf* ae = reinterpret_cast<const bf*>(&a);
  const bf* oe = reinterpret_cast<const bf*>(&o);
  float x = 0.0f;
#pragma unroll
  for (int e = 0; e < 4; ++e) x += f32(ae[e]) * f32(oe[e]);
#pragma unroll
  for (int m = 16; m > 0; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
  if (lane == 0) r[row] = x;
}

// Step 10: h = bf16(bf16(h + xk) + xv), in place on h (which holds dXq).
template <int Vec>
__global__ void add3(bf* __restrict__ h, const bf* __restrict__ xk, const bf* __restrict__ xv, int64_t n_vec) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= n_vec) return;
  if constexpr (Vec == 8) {
    uint4 hv = reinterpret_cast<const uint4*>(h)[v];
    const uint4 kv = reinterpret_cast<const uint4*>(xk)[v], vv = reinterpret_cast<const uint4*>(xv)[v];
    bf* he = reinterpret_cast<bf*>(&hv);
    const bf* ke = reinterpret_cast<const bf*>(&kv);
    const bf* ve = reinterpret_cast<const bf*>(&vv);
#pragma unroll
    for (int e = 0; e < 8; ++e) he[e] = rn(r16(f32(he[e]) + f32(ke[e])) + f32(ve[e]));
    reinterpret_cast<uint4*>(h)[v] = hv;
  } else {
    h[v] = rn(r16(f32(h[v]) + f32(xk[v])) + f32(xv[v]));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Fused dP + softmax backward (gqa_rope_backward_attn.cu): true when it handled the call.
bool fused_dp_softmax(const bf* dO, const bf* V, const bf* P, bf* dS, int64_t BH, int64_t S, int64_t D,
                      int64_t ld, float scaling, cudaStream_t stream);

Support supports(const GqaRopeShape& s, const Options&) {
  const Context& ctx = Context::current();
  if (!ctx.no_code().empty()) return {ctx.no_code()};
  if (s.tokens() <= 0) return {"no tokens"};
  if (s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0) return {"query heads not a multiple of KV heads"};
  if (s.head_dim % 8 != 0) return {"head_dim not a multiple of 8"};
  if (s.hidden_size % 8 != 0) return {"hidden_size not a multiple of 8"};
  if (s.batch * s.num_heads > (1 << 30) || s.num_heads + 2 * s.num_kv_heads > (1 << 20))
    return {"too many heads"};
  return {};
}

namespace {

// Projection pairs (dX = dY·W, dW = dYᵀ·X) through the sm_90a kernel of linear_backward_sm90.cu, on
// request only: ATTNBWD_CUDA_GQA_PROJ=auto|sm90|cublaslt (environment, per call); auto = cuBLASLt.
// Measured on the H200 (perf/NOTES.md): the kernel's launches serialise what the cuBLASLt path
// overlaps (grad_o_weight runs on the side stream under the whole attention stage), and the forced
// kernel path is 9-34% slower on every workload (0.80x geomean, seventh session). A hybrid (only the dX
// GEMMs through the kernel's dX-only plans on half the SMs, the weight gradients in cuBLASLt on the side
// stream) measured 0.74-0.95x on all 16 (eighth session) and was removed; its q/k/v half came back for large T with
// the kernel of today, on all SMs and unsplit: ATTNBWD_CUDA_GQA_QKV=groupeddx (below).
enum class ProjPath { Auto, Sm90, CublasLt };

// ATTNBWD_CUDA_GQA_OVERLAP=auto|on|off: steps 3-5 on two streams (auto, on) or all on the caller's (off).
// Measured on an H200 (2026-12-01, all 16 workloads, same call): geomean E 0.425 -> 0.434, 1.00-1.09x
// per workload (most on small S: #7 1.09x, #0 1.06x, #2 1.05x) except #6 (B=1, S=2048) 0.99x.
bool gqa_overlap() { return env_switch("ATTNBWD_CUDA_GQA_OVERLAP", {"auto", "on", "off"}) != 2; }

// ATTNBWD_CUDA_GQA_QKV=auto|separate|grouped|thin|groupeddx: the q, k, v projection pairs as separate GEMMs (cuBLASLt, or
// three sm_90a launches with ATTNBWD_CUDA_GQA_PROJ=sm90) followed by the three-way add, or as one grouped
// sm_90a launch (grouped: dX = Σ_s dXp_s·W_s summed in fp32 over all gradient columns with one rounding, so
// no dXk/dXv and no add; the three weight gradients by row segment; sm_90 only). auto (with
// ATTNBWD_CUDA_GQA_PROJ=auto, where the kernels take the call): thin (below) for 128 ≤ T ≤ 256, grouped for
// T < 128 and 256 < T ≤ 384, groupeddx (below) from 2048 tokens where its tiles fill the SMs' rounds, else separate.
// The history of those limits: measured on an
// H200 (2026-12-01, eighth session, all 16 workloads, two runs each): grouped 1.14x at T = 128 (#11),
// 1.00-1.02x at T = 131 and 256, 0.88-0.97x at T ≥ 512 (there cuBLASLt's weight gradients on the side
// stream beside its dX GEMMs beat one launch of both). With the planner's fitted dW cost (tenth session)
// and every nearby plan timed (eleventh session, perf/results/h200-2026-12-01-s11-gqa-grouped-plans-t293-898.json):
// T = 293 1.025x with the planner's plan in one call and 0.997x in another, T = 512 0.95x, 691 0.99x, 898 0.94x at
// the best plan tried; so the limit stayed at 256 then (raised to 384 in the twenty-eighth session, below).
// thin: the same three pairs (the same sums and roundings: dX one fp32 sum over all gradient columns) as one launch
// of linear_thin_sm90.cu, which streams the weights in and their gradients out together (T ≤ 256, sm_90), plus the
// launch that sums its dX partials. Measured on an H200 (nineteenth session, perf/NOTES.md; v4 of the kernel): per
// call thin/grouped 1.245x at #5 (T = 131), 1.04x at #2 and #13 (T = 256), 0.99x at #11 (T = 128, within the noise:
// kernels 41.3 + 5.1 µs against the grouped launch's 46.4), so auto was thin for 128 < T ≤ 256 and grouped up to 128.
// Under the spec's CUPTI span, after the small attention kernels became auto at #11 (twenty-fifth session, three
// interleaved pairs): thin 97.7 / 96.7 / 97.6 µs per call against grouped 102.2 / 102.1 / 102.2 at T = 128 (1.05x),
// so auto = thin from T = 128 (the smallest T measured) and grouped below.
// Above 256 tokens (thin's limit), after the grouped launch's epilogue moved to store threads and compact code
// (twenty-seventh and twenty-eighth sessions), auto = grouped up to 384 tokens (three 128-row tiles of dX, as at
// 293): H200, two interleaved suite pairs (perf/NOTES.md, twenty-eighth session): #7 (T = 293) 173.1 / 173.1 µs
// grouped against 181.1 / 180.1 separate; grouped still lost at T = 512 (237.9 against 229.3) and above.
//
// groupeddx: dX of the three pairs as one grouped dX-only sm_90a launch (dX = Σ_s dXp_s·W_s over all 6144 gradient
// columns, one rounding, straight into grad_hidden_states: no dXk / dXv, no add3), the weight gradients by cuBLASLt on
// the side stream as on the separate path. auto takes it from kGroupedDxMinTokens tokens where the launch's 128 × 256
// dX tiles (unsplit) fill their rounds of CTAs to at least kGroupedDxMinFill on average (one CTA per SM). Measured on
// an H200 (thirty-first session, perf/NOTES.md, interleaved rounds): T = 3072 (#10) 1.025x, T = 4096 (#3, #9)
// 1.014-1.019x per call; T = 2048 1.012-1.017x unsplit (#6, #8, #14, #15; 320 tiles on 132 SMs, fill 0.81) where the
// planner's two-way split gave 0.97-0.98x; T = 1024 0.995x unsplit (160 tiles, fill 0.61), T = 512-898 0.91-1.0x.
enum class QkvPath { Auto, Separate, Grouped, Thin, GroupedDx };
constexpr int64_t kGroupedMaxTokens = 384, kGroupedDxMinTokens = 2048;
constexpr double kGroupedDxMinFill = 0.75;
constexpr int64_t kThinMinTokens = 128;  // auto: thin for kThinMinTokens ≤ T ≤ 256 (its limit), else grouped
QkvPath qkv_path() {
  return static_cast<QkvPath>(
      env_switch("ATTNBWD_CUDA_GQA_QKV", {"auto", "separate", "grouped", "thin", "groupeddx"}));
}

// ATTNBWD_CUDA_GQA_ATTN=auto|gemm|kv|kvws|small: steps 3-5 as cuBLASLt GEMMs around the softmax-backward row kernel
// (gemm: P read twice, dP written and read back, dS written once and read twice), or key-major on sm_90a
// (kv, gqa_rope_backward_attn_sm90.cu: O = bf16(P·V) by cuBLASLt and r = Σ dO⊙O, then one kernel that
// reads P once more, keeps dP in registers and writes dSᵀ once for the dQ GEMM; head_dim 128, S % 64 == 0,
// sm_90). auto = kvws (below) where it applies with S ≥ 1024 and T ≤ 4096 tokens, else kv there; kvws also where
// S ≥ 256 and 512 ≤ T ≤ 4096 with the dQ pass (ATTNBWD_CUDA_GQA_KVDQ not off; else gemm there); small (below)
// where S ≤ 160 and T ≤ 256; else gemm. The middle rule (fifty-ninth session): with the dQ pass kvws measured
// 1.017x at B = 16, S = 256 (#3), 1.008x at B = 8, S = 384 (#10), 1.031x at S = 512 (#12), 1.043x at B = 4, S = 512
// (#15) and 0.990x at B = 1, S = 256 (#13, T = 256) over gemm on an H100 (fifty-eighth session, three rounds); without
// the pass 0.96-1.00x there.
// Measured on an H200 (2026-12-01,
// ninth session, the twelve workloads with S % 64 == 0, two runs each; perf/NOTES.md): kv 1.13x at B = 1,
// S = 2048 (#6), 1.02-1.04x at S = 1024 with B ≤ 2 (#4, #14), 0.96-1.01x at B = 4, S = 1024 (#9) and
// 0.95-0.98x at S ≤ 512 (there the kernel's extra launches (O, r) and its single-stream order cost more than the
// two-stream GEMMs; at T = 4096 the gemm path's side-stream overlap wins).
// kvws: the same steps with the warp-specialised form of the kernel (a TMA producer warp and two consumer
// warpgroups of 64 keys each; S % 128 == 0; the same bits as kv): the kernel 1.10-1.14x faster than kv's at
// S ≥ 512 (ncu, H200), slower at S = 256 (half as many CTAs); whole op 1.20x over gemm at #6 (one run). At B = 4,
// S = 1024 (T = 4096, #9) kvws over the default then (gemm) in five runs over two sessions: 1.01-1.14x (tenth session:
// three interleaved pairs 1.01-1.14x, median 1.09x; then the suites 1.10x), so auto's token limit is 4096.
// small: two launches of gqa_rope_backward_attn.cu's mma.sync kernels, query-major dS and dQ then key-major dK₃₂
// and dV₃₂ (a programmatic dependent), any S, head_dim 128, no padding copies: the chain of seven launches at small
// S (≈ 26 µs at S = 131 on an H200, mostly launch latency; perf/NOTES.md, nineteenth session) in two. Measured on
// an H200 (twentieth session, CUDA events): 0.83-0.99x of auto per call (its kernels latency-bound at ~5 warps per
// SM). Under the spec's clock (the CUPTI span, twenty-fifth session, perf/NOTES.md) it is faster where the whole call
// is a few hundred query rows: #5 (B = 1, S = 131: no padding copies) 108 µs against 118, #11 (S = 128) 103 against
// 104-107, #2 (B = 2, S = 128) equal, and slower from S = 256 (#13 145 against 135-138, #0 S = 691 373 against 337), so
// auto = small for S ≤ kSmallMaxSeq and T ≤ kSmallMaxTokens, where the kernels can take the call (else gemm, padded as
// before where the inputs do not suit them).
enum class AttnPath { Auto, Gemm, Kv, KvWs, Small };
constexpr int64_t kKvMinSeq = 1024, kKvMaxTokens = 4096, kSmallMaxSeq = 160, kSmallMaxTokens = 256;
constexpr int64_t kKvMidMinSeq = 256, kKvMidMinTokens = 512;
AttnPath attn_path() {
  return static_cast<AttnPath>(env_switch("ATTNBWD_CUDA_GQA_ATTN", {"auto", "gemm", "kv", "kvws", "small"}));
}

// ATTNBWD_CUDA_GQA_DPSM=auto|on|off|wide, the GEMM attention path: steps 3-4 (dP = bf16(dO·Vᵀ), the softmax backward
// and, with padding, P's padded copy) as one query-major sm_90a kernel (on: gqa_rope_backward_attn_sm90.cu, 64 query
// rows per CTA, dP by wgmma in registers, twice, never in global memory, P from DRAM once; wide: 128 rows per CTA, two
// warpgroups sharing the V tiles; an Error where it cannot take the call: sm_90, head_dim 128, 16-byte aligned tensors),
// or (off) as the cuBLASLt dP GEMM, which writes dP to global memory, and the row kernel, which reads it back with P.
// auto: the narrow kernel where the attention is padded (S % 8 != 0) and its grid, ceil(S/64) CTAs per head, fits in
// one wave of two CTAs per SM; else the pair. Measured on an H200 (thirty-sixth session, perf/NOTES.md; two interleaved
// rounds over the nine GEMM-path workloads): the kernel's third form 1.026-1.028x per call at #7 (S = 293, B = 1: 160
// CTAs, padded; auto against off then 1.013x), slower everywhere else: 0.97x at #0 (S = 691: 352 CTAs, 1.33 waves;
// the kernel is issue-bound at two warps per scheduler, so the partial wave costs it up to half again) and 0.98x at #1
// (512 CTAs), 0.92-0.96x on the unpadded workloads, where the pair has no padded copy of P to write.
// on3 (by name only, thirty-seventh session, not yet run on a GPU): the narrow form at three CTAs per SM (two stages,
// 75 KB, ≤ 168 registers): three warps per scheduler against ncu's 1.9 for the two-CTA form, which it found latency-
// bound (0.37 issued warps per scheduler), and #0's 352 CTAs in one wave of 396.
int dpsm_switch() { return env_switch("ATTNBWD_CUDA_GQA_DPSM", {"auto", "on", "off", "wide", "on3"}); }

ProjPath proj_path() {
  return static_cast<ProjPath>(env_switch("ATTNBWD_CUDA_GQA_PROJ", {"auto", "sm90", "cublaslt"}));
}

// ATTNBWD_CUDA_GQA_DO=auto|split|view: the attention GEMMs read dO from a head-split copy of dA (split), or,
// for B = 1 on the cuBLASLt path without padding, straight from dA as a strided view (view, auto: head h is
// dA's columns h·D.. with row stride QP, heads D apart, so no copy kernel; B > 1 needs the copy, as one
// stride cannot step over both heads and batch elements).
// Measured on an H200 (2026-12-01, seventh session, all 16 workloads, two runs each): view 1.012-1.073x on
// the eight B = 1 workloads, so auto = view where it applies (B = 1 and no padding, below).
bool do_split() { return env_switch("ATTNBWD_CUDA_GQA_DO", {"auto", "split", "view"}) == 1; }

// ATTNBWD_CUDA_GQA_PAD=auto|off: where S % 8 != 0, the attention GEMMs on copies padded to S8 = S rounded up
// to 8 rows per head (auto), or on the unpadded tensors (off). cuBLASLt offers only its older kernels for
// batched GEMMs with a size that is not a multiple of 8: probed on an H200 (2026-12-01) at S = 293 every
// candidate was one of them and each of the four GEMMs ran ~2x slower than at S = 296 (perf/NOTES.md).
// Padding costs one copy of Q, K, V (in the head-split launch) and a padded copy of P written by the
// softmax-backward kernel; the pad rows and columns are zeros, so the results are the unpadded ones.
// Measured (H200, seventh session): 1.09-1.32x on the four odd-S workloads.
bool pad_switch_off() { return env_switch("ATTNBWD_CUDA_GQA_PAD", {"auto", "off"}) == 1; }

// ATTNBWD_CUDA_GQA_MERGE=auto|scalar|fused: steps 6-8 (GQA sums, RoPE, merge). auto: a pass with 16-byte moves where
// D % 16 == 0 and the pointers are aligned; scalar: the pass with one element pair per thread (also the pass's
// fallback); fused: on the small attention path, in the small kernels' epilogues (gqa_small_attn_merge_unsupported:
// group sizes 1, 2, 4, 8 as clusters, aligned cos and sin; else an Error naming the switch), on the others the pass. The same
// math and order everywhere: the same bits. fused is slower on an H200 (twenty-sixth session, perf/NOTES.md: #5 109.5
// against 105.5 µs per call): it saves the pass (6 µs) but the thin q/k/v launch after it can no longer load its
// weights under a short kernel (its programmatic-dependent prologue overlaps the pass, not the busy attention kernels),
// and the RoPE in the first kernel's stores lengthens that kernel by ~4 µs.
int merge_mode() { return env_switch("ATTNBWD_CUDA_GQA_MERGE", {"auto", "scalar", "fused"}); }
bool merge_scalar() { return merge_mode() == 1; }

// ATTNBWD_CUDA_GQA_DA=auto|cublaslt|thin: dA = dY·Wo by cuBLASLt, or by linear_thin_sm90.cu's dX-only form (T ≤ 256,
// sm_90: every CTA a 128-column slice of dA and a range of Wo's rows, Wo streamed once through a deep ring, the fp32
// partials of a slice summed in range order by a second, programmatic-dependent launch: the same fp32 sum of exact
// products, one rounding). cuBLASLt reads Wo (42 MB at Mistral's sizes) at 1.2-1.6 TB/s at T = 131-293 (27 µs at
// gqa #5 on an H200, twenty-second session) on the critical path; the thin form was written to stream it faster but
// measured slower (H200, twenty-third session, CUPTI span, two runs each: #5 137 against 120-129 µs per call, #11 126
// against 112-113, #2 150-158 against 141, #13 151-162 against 144-151; serialised o_proj stage at #5 34.0 against
// 27.6 µs), so auto = cuBLASLt and thin is asked for by name.
// heads (forty-fourth session): where the op copies dA into the head-split dO (B > 1 or ATTNBWD_CUDA_GQA_DO=split, no
// padding, the cuBLASLt o path), dA written straight into dO by one cuBLASLt pointer-array batch of B·Hq GEMMs,
// dO[b, h] = dY_b·Wo[:, h·D..] (S × D × hidden each; the matrices' addresses by a small kernel on the stream; in pieces
// of whole batch elements of at most ATTNBWD_CUDA_GQA_DA_ROWS rows where that cuts dA), and no copy. Each element the
// same fp32 dot product, one rounding. Counted (perf/NOTES.md, forty-third session): the copy takes 10-22 µs at the six
// large-B workloads (#3, #8, #9, #10, #14, #15; H100). Measured (H100, forty-fifth session): the probe
// (perf/probes/cublaslt_da_pointer_array.cu) has the batch 7-9 µs faster than strided dA + copy from S = 384, even at
// B = 8, S = 256 and 25 µs slower at B = 16, S = 128 (512 GEMMs of 128 rows); per call, three interleaved rounds, one
// batch (DA_ROWS off) against auto's copy: #9 1.010x, #14 1.007x, #15 1.016x, #3 1.003x, #10 1.001x, #2 (S = 128, B = 2)
// 1.007x, #8 (S = 128, B = 16) 0.955x; the batch in 2048-row pieces lost 3.4 % at #10. On an H200 (forty-sixth
// session, three rounds, auto against cublaslt): #3 0.996x, #8 1.000x, #9 1.003x, #10 0.998x, #14 1.011x, #15 1.011x,
// geomean E of the six 0.6580 -> 0.6602. So auto takes one batch on sm_90 from S = kDaHeadsMinSeq where the copy
// would run (DA_ROWS auto then cuts nothing); other archs keep the copy (not measured there). heads where the op takes
// no copy (padding, B = 1's view, the sm_90a o pair) is an Error naming the switch.
constexpr int64_t kDaHeadsMinSeq = 256;
enum class DaPath { Auto, CublasLt, Thin, Heads };
DaPath da_path() {
  return static_cast<DaPath>(env_switch("ATTNBWD_CUDA_GQA_DA", {"auto", "cublaslt", "thin", "heads"}));
}

// ATTNBWD_CUDA_GQA_PDL=auto|off|thin: the q/k/v launch as a programmatic dependent of the kernel before it (the merge,
// or the small kernels' second launch): the thin launch's CTAs start, load X and fill the W ring while that kernel
// finishes, and wait for it before loading dXp; the grouped launch's (linear_backward_sm90.cu) set up and wait before
// their first load. auto: both; thin: the thin launch only (the grouped one plain, as before the fortieth session); off:
// plain launches. The same bits. Measured on an H200: thin 1.019-1.023x per call at #5, #13, #2 (nineteenth session);
// the grouped launch's 1.009x at #7 (fortieth session, three interleaved rounds; #12, without it, 0.996x).
int pdl_switch() { return env_switch("ATTNBWD_CUDA_GQA_PDL", {"auto", "off", "thin"}); }

// ATTNBWD_CUDA_GQA_SMALL_PDL=auto|on|off|late: the small attention path's second kernel (small_dkdv_kernel) as a
// programmatic dependent of the first (on; auto): its CTAs start under the first kernel and do dV (P and dO only)
// before their griddepcontrol.wait; or a plain launch after the first ends (off); late below. The same bits. Why off
// might win (forty-seventh session's H100 timelines of #5 and #11, perf/NOTES.md): late grad_o_weight's cuBLASLt GEMM
// (clusters of 4-8 CTAs of 208 KB shared memory, sized for 100 SMs) is queued on the side stream right after dA, but
// its first CTA starts only when the first kernel ends (#11: 33.9 against 24.5 µs): the early second launch's CTAs
// (39 KB each) take the SMs the first kernel leaves empty (64 of 132 at #11), so no SM has 208 KB free until then.
// grad_o_weight then ends ~10 µs later than it could and holds ~96 SMs while the merge and the thin q/k/v launch's
// first CTAs run; the q/k/v launch's last CTAs start only when it ends (#11: 66.2 µs, the call ends at 113.0). off lets
// it start on the empty SMs under the first kernel, for a second kernel that no longer overlaps the first (~+3 µs on
// the chain). Counted: −3 to −7 µs at #11, #5, #2. Measured (H100, forty-seventh session, three interleaved rounds,
// time auto / this): off 1.001 / 0.996 / 0.983 at #2 / #5 / #11 — grad_o_weight did start under the first kernel
// (#11: 29.9 µs) and end 15 µs sooner, and the merge took 4 µs instead of 13, but the second kernel, now beside it,
// ended 10 µs later; off with ATTNBWD_CUDA_GQA_DWO_SMS=66 1.012 / 1.005 / 1.005 and 1.011 / 1.006 / 0.995 (on with 66:
// 0.887 / 0.995 / 0.913). Within the rounds' spread: auto stays on, off by name.
// late: still a programmatic dependent, but the first kernel lets it queue only after its first sweep (r; with r from
// O, after that), ~half-way through: grad_o_weight's CTAs, queued meanwhile, take the empty SMs first, and the second
// kernel's CTAs (39 KB) then land beside the first kernel's (172 KB; 59 K registers of 64 K), keeping half of their
// overlap. Measured (H100, forty-eighth session, three interleaved rounds, time auto / late): 1.008 / 0.991 / 0.979 at
// #2 / #5 / #11; late with DWO_SMS=66 1.001 / 1.002 / 1.006. #11's timeline: grad_o_weight ran 29-51 µs (34-66 with on)
// and the merge took 5 µs, but the second kernel beside it took 26.7 µs (20.1 with on) and ended at 57 µs (45), so the
// thin q/k/v launch started at 60 µs (50) and, alone, took 51 µs (59). By name only.
int small_pdl_switch() { return env_switch("ATTNBWD_CUDA_GQA_SMALL_PDL", {"auto", "on", "off", "late"}); }

// From this many tokens auto takes GROUP=on (below). Measured on an H200 (twenty-second session, perf/NOTES.md; two and
// three runs per side, interleaved): late + group against early + per-head 1.03x at #0, #1, #3, #8, 1.04x at #15,
// 1.00-1.01x at the other T ≥ 691; at T ≤ 512 group 0.99-1.00x. DWO=late is auto at every T since the twenty-third
// session: by CUDA events around the call late had measured 0.96-0.99x at T ≤ 512, but by the spec's clock (the CUPTI
// span of the call's kernels) late is 1.04-1.19x there (#5 130-136 → 113 µs, #11 116-120 → 104, #2 144-148 → 135,
// #13 145-148 → 137, #7 195-196 → 187, #12 239-242 → 233; two runs each, interleaved).
constexpr int64_t kGroupMinTokens = 513;

// ATTNBWD_CUDA_GQA_DWO=auto|early|late: where grad_o_weight = dYᵀ·A runs on the side stream. early: from the op's
// start, beside dA = dY·Wo (the two share the GPU while dA is on the critical path). late: after dA (and after dV₃₂
// where dV₃₂ is on the side stream), so it runs under the attention chain (memory- or latency-bound kernels); the
// main stream then waits for dV₃₂ only (a partial join), and dK₃₂ runs on the main stream. The same GEMMs and
// kernels either way (the same bits). auto = late.
bool dwo_late() { return env_switch("ATTNBWD_CUDA_GQA_DWO", {"auto", "early", "late"}) != 1; }

// ATTNBWD_CUDA_GQA_DA_ROWS=auto|off|1024|2048: dA = dY·Wo by cuBLASLt as GEMMs of at most that many rows (the rows are
// independent: each element the same fp32 dot product, cuBLASLt's algorithm chosen per piece). At T >= 3072 cuBLASLt's
// answer for the whole dA opens the call with a 0.7 µs memset of its own (thirty-second session) and starts its kernel
// 10-19 µs later (timelines of #3, #9, #10), where 2048 rows start the same kernel at once; pieces of 2048 rows cost
// ~5.5 µs more kernel time than one GEMM and save the gap. auto: 2048 from kDaPieceMinTokens tokens on sm_90 (the
// memset is cuBLASLt's sm_90 answer; elsewhere one GEMM), else off. Measured (H100, forty-third session, three
// interleaved rounds, 2048 against off): #3 1.016x, #10 1.017x, #9 1.008x, the others one piece (0.985-1.007x: noise).
constexpr int64_t kDaPieceMinTokens = 3072;
// (auto, where ATTNBWD_CUDA_GQA_DA's auto writes dA into the heads, cuts nothing: *is_auto says the value was auto.)
int64_t da_rows_switch(const Context& ctx, int64_t T, bool* is_auto) {
  static constexpr int64_t kRows[] = {0, 0, 1024, 2048};
  const int v = env_switch("ATTNBWD_CUDA_GQA_DA_ROWS", {"auto", "off", "1024", "2048"});
  *is_auto = v == 0;
  if (v == 0) return ctx.cc() == 90 && T >= kDaPieceMinTokens ? 2048 : 0;
  return kRows[v];
}

// ATTNBWD_CUDA_GQA_PV=auto|main|side: where O = bf16(P·V), the GEMM the softmax row term r = Σ_d dO·O can be taken
// from, runs. It reads only the inputs P and V, not dA. main (auto; as measured so far): the key-major path computes O
// on the caller's stream after dA; the small kernels' first kernel and the dP + softmax kernel (ATTNBWD_CUDA_GQA_DPSM)
// take no O: they sum r = Σ_k P·bf16(dP) over the keys in a first pass, before the pass that writes dS. side
// (thirty-eighth session, not yet run on a GPU): O on the side stream from the op's start, beside dA, each sized by
// cuBLASLt's SM-count target for its part of the GPU (ATTNBWD_CUDA_GQA_PV_SMS); the key-major path's r then follows dA
// at once, and the small path's first kernel and the dP + softmax kernel take r from O and skip their first pass
// (other bits than main's there: r's sum reassociated, as the key-major path's). Counted (perf/NOTES.md, thirty-eighth
// session): O at #6 reads P's 268 MB (DRAM-bound, ~96-118 µs after dA today) while dA's 86 GFLOP is compute-bound; the
// first small kernel and the dP + softmax kernel drop a third and half of their products. side on the GEMM attention
// path with the row kernel (which takes r from P and dP in one pass) is an Error naming the switch.
bool pv_side() { return env_switch("ATTNBWD_CUDA_GQA_PV", {"auto", "main", "side"}) == 2; }

// ATTNBWD_CUDA_GQA_PV_SMS=auto|off|N: with ATTNBWD_CUDA_GQA_PV=side, the SMs O takes (cuBLASLt's SM-count target on the
// key-major path; elsewhere the O kernel's grid of at most N CTAs, one per SM); a cuBLASLt dA GEMM is sized for the
// others. off: both for every SM (each a persistent grid of one CTA per SM: they then take turns). auto, on sm_90 (from
// the count, not measured): O's share of the two products' FLOPs, r / (1 + r) with r = Hq·S·D / (hidden·Hq·D) (O's
// 2·B·Hq·S²·D against dA's 2·T·hidden·Hq·D), of the SMs, times 1.25 for cuBLASLt's O on the key-major path (DRAM-bound
// on P) and 2.5 for the O kernel (mma.sync, latency-bound: about half cuBLASLt's rate per SM), within 8 and half the
// SMs: 28 and 47 of 132 at S = 1024 and 2048; 8, 18, 27 and 39 at S = 128, 293, 449 and 691. Elsewhere off. On one
// stream (ATTNBWD_CUDA_STREAMS=one, STAGES=1) the targets stay (the same GEMM algorithms, the same bits) but the O kernel
// takes every SM.
int pv_sm_target(const Context& ctx, bool kv_attn, int64_t S, int64_t hidden) {
  const int sms = ctx.sm_count();
  const double r = static_cast<double>(S) / static_cast<double>(hidden), share = r / (1.0 + r);
  const int n = static_cast<int>(share * (kv_attn ? 1.25 : 2.5) * sms + 0.5);
  const int auto_sms = std::min(std::max(n, 8), sms / 2);
  return sm_target_switch("ATTNBWD_CUDA_GQA_PV_SMS", sms, ctx.cc() == 90 ? auto_sms : 0);
}

// ATTNBWD_CUDA_GQA_KVW=auto|after|under, the key-major attention path with cuBLASLt weight gradients (the separate and
// groupeddx q/k/v paths): where grad_k_weight and grad_v_weight are queued. after (auto; as measured so far): on the
// side stream after the merge pass, with grad_q_weight. under (thirty-eighth session, not yet run on a GPU): the merge
// pass's k and v half as soon as the key-major kernel has written dK32 and dV32, then both weight gradients on the side
// stream, beside the dQ GEMM (the merge's q half follows it), the GPU split between them by ATTNBWD_CUDA_GQA_KVW_SMS.
// Counted (perf/NOTES.md, thirty-eighth session): the dQ GEMM is DRAM-bound (dSᵀ's 268 MB at #6: 85-92 µs with the
// tensor cores mostly idle), the two weight gradients 43 GFLOP at T = 2048, which today share the compute-bound end
// of the call with grad_q_weight and the dX launch. The same GEMM descriptions and merge math: without SM targets
// (KVW_SMS=off) the bits of after wherever cuBLASLt's choices are the same (within a process, or untuned: deterministic
// calls, ATTNBWD_CUDA_LT_TUNE=off); a target is part of the choice. Forcing under where the key-major kernel does not
// run, or with the sm_90a q/k/v launches, is an Error.
bool kvw_under() { return env_switch("ATTNBWD_CUDA_GQA_KVW", {"auto", "after", "under"}) == 2; }

// ATTNBWD_CUDA_GQA_DWQKV=auto|apart|batch, the q/k/v weight gradients by cuBLASLt on the side stream (the separate and
// groupeddx q/k/v paths): apart, three GEMMs (grad_q_weight, grad_k_weight, grad_v_weight); batch, one cuBLASLt
// pointer-array batch of G + 2 GEMMs of Hkv·D rows each (grad_q_weight as its G = Hq/Hkv row blocks; gemm_listed),
// one launch instead of three. Why (fifty-ninth session, H100 timelines of #3 and #15): the call ends with the three on
// the side stream, the main stream idle (dW_q, then dW_k and dW_v: 55 + 56 µs at #3, 32 + 30 at #15), each launch with
// its own ramp and tail. Each element the same fp32 sum over T with one rounding; cuBLASLt's kernel (and its split of
// T) may differ, so not apart's bits. Measured (H100): 0.995-1.011x per call in two calls of three rounds; in five
// rounds over the eleven workloads where it applies (sixtieth session) batch won each round's geomean (+0.2-0.5 %),
// 0.998-1.012x per workload (#3 and #8, B = 16, 0.998x): auto = batch where it fits. batch forced where those GEMMs
// do not run (the grouped, thin or sm90 q/k/v launches), with ATTNBWD_CUDA_GQA_KVW=under, or with G + 2 > kMaxListed
// is an Error; auto takes apart there.
int dwqkv_switch() { return env_switch("ATTNBWD_CUDA_GQA_DWQKV", {"auto", "apart", "batch"}); }

// ATTNBWD_CUDA_GQA_DXSUM=auto|add3|acc, the separate cuBLASLt q/k/v path (three dX GEMMs): how grad_hidden_states =
// dXq + dXk + dXv is formed. add3: dXk and dXv into scratch, then bf16(bf16(dXq + dXk) + dXv) by one element-wise pass,
// the reference's two rounded additions. acc: the dXk and dXv GEMMs add into grad_hidden_states through cuBLASLt's C
// operand (beta = 1, in place), no scratch writes of dXk and dXv and no add pass. Its rounding points are add3's:
// cuBLASLt's bf16 epilogue rounds the product to bf16 before it adds C (measured on an H100, forty-first session:
// every result of a beta = 1 GEMM a sum of two bf16 grids; CudaDeterminism.AccumulatingGemmIsNotTimedAndAddsOnce;
// whether every sum is add3's bits exactly is not checked). auto = acc on that path (add3 with the sm_90a
// pairs, ATTNBWD_CUDA_GQA_PROJ=sm90). Measured on an H200 (fortieth session, three interleaved rounds;
// perf/NOTES.md): acc 1.012x at #0, 1.002x at #1, 1.014x at #4 and #12 — the add pass ended the call 2.5-5 µs after the
// last weight gradient and slowed it. acc where the separate cuBLASLt path does not run is an Error.
int dx_sum_switch() { return env_switch("ATTNBWD_CUDA_GQA_DXSUM", {"auto", "add3", "acc"}); }

// ATTNBWD_CUDA_GQA_DKSIDE=auto|off|on, the padded GEMM attention path with late grad_o_weight (dK32, dV32 and dQ by
// cuBLASLt on the caller's stream, one after another, each a grid of 96-132 CTAs of one per SM): on queues dK32 = dSᵀ·Q
// on the side stream after grad_o_weight, waiting for dS, beside dV32 and dQ on the caller's stream, which waits for it
// (and so for grad_o_weight) before the merge. off (auto): all three on the caller's stream. The same GEMM descriptions
// (the same bits where cuBLASLt's choices are the same). Counted (perf/NOTES.md, fortieth session): at #0 the three take
// 40.5 µs in series for ~32 µs of their CTAs' SM time. Measured on an H200 (fortieth session, three interleaved rounds):
// #0 1.019x, #1 0.989x, #7 0.927x — where grad_o_weight ends after dS (#1, #7) dK32 waits for it and the merge with
// it; so auto stays off. on where the form does not run is an Error.
bool dk_side() { return env_switch("ATTNBWD_CUDA_GQA_DKSIDE", {"auto", "off", "on"}) == 2; }

// ATTNBWD_CUDA_GQA_KVDQ=auto|off|on: on the key-major path's warp-specialised form (S % 128 == 0), r and dQ from one
// query-major pass over P (gqa_rope_backward_attn_sm90.cu's dQ pass: dQ = scaling·((P⊙dP)·K − r·(P·K)), the identity
// that needs no dS) in place of O = P·V, the row kernel and the dQ GEMM over dSᵀ; the key-major kernel then writes no
// dSᵀ. P is read twice instead of twice plus dS written and read (at #6 1.07 GB → 0.54 GB) for +34 GFLOP
// (perf/NOTES.md, fifty-eighth session). dQ rounded once from an fp32 sum (the reference rounds dS twice first);
// r = Σ P·dP in the reference's order (off takes r = Σ dO⊙O). auto = on: measured on an H100 (three interleaved rounds
// against off) 1.061× at #4, 1.098× at #6, 1.063× at #9, 1.075× at #14. No effect off that path; where the pass cannot
// take a call of that path (K not 16-byte aligned, say) auto keeps the dQ GEMM and on is an Error naming the switch.
int kvdq_switch() { return env_switch("ATTNBWD_CUDA_GQA_KVDQ", {"auto", "off", "on"}); }

// ATTNBWD_CUDA_GQA_DKDV=auto|apart|batch, the padded GEMM attention path (S % 8 != 0; dK32 and dV32 on one stream):
// dK32 = dSᵀ·Q and dV32 = Pᵀ·dO (P's padded copy, dO's padded head split) are the same problem (Sp x D from Sp x Sp
// transposed times Sp x D, every leading dimension and head stride equal), so with the scratch laid out dS | Pp,
// Qp | dO and dK32 | dV32 they are one strided cuBLASLt batch of 2·B·Hq GEMMs (batch) instead of two launches of B·Hq
// each (apart). Summed over the group (ATTNBWD_CUDA_GQA_GROUP, auto's from T = 513) the same holds with 2·B·Hkv GEMMs
// of K = G·Sp, and dV32's [B, Hkv, Sp, D] then sits right after dK32's, inside dK32's piece. Each element the same
// fp32 dot product, one rounding, where cuBLASLt's algorithm for the batch does not split K. Measured (perf/NOTES.md,
// forty-seventh session, H100, 3 + 5 interleaved rounds against apart): #7 1.034x / 1.032x, #0 1.006x / 1.012x,
// #1 1.004x / 0.997x; so auto = batch wherever the form runs (a cuBLASLt batch, no arch-specific kernel), apart
// elsewhere. batch asked where the form does not run (no padding, the small or key-major kernels,
// ATTNBWD_CUDA_GQA_DKSIDE=on) is an Error naming the switch.
int dkdv_switch() { return env_switch("ATTNBWD_CUDA_GQA_DKDV", {"auto", "apart", "batch"}); }

// ATTNBWD_CUDA_GQA_KVW_SMS=auto|off|N: with ATTNBWD_CUDA_GQA_KVW=under, the SMs grad_k_weight's and grad_v_weight's GEMMs
// are sized for; the dQ GEMM is sized for the others. auto, on sm_90 (from the count, not measured): 66 of 132 (the dQ
// GEMM's DRAM stream needs ~40 GB/s per SM on 66); elsewhere off. off: every SM for each.
int kvw_sm_target(const Context& ctx) {
  const int sms = ctx.sm_count();
  return sm_target_switch("ATTNBWD_CUDA_GQA_KVW_SMS", sms, ctx.cc() == 90 ? sms_of_132(sms, 66) : 0);
}

// ATTNBWD_CUDA_GQA_DWO_SMS=auto|off|N: the SM count cuBLASLt chooses and sizes grad_o_weight's GEMM for
// (Gemm::sm_target), where dWo runs late (beside the attention chain). Every cuBLASLt GEMM of this op on sm_90 is a
// persistent grid of one CTA per SM that holds all of them until it ends, so the chain queued beside dWo waited for it
// as a whole (perf/NOTES.md, thirty-second session); with a target of N SMs the chain's kernels run on the others
// while dWo takes longer. off: every SM. auto, on sm_90 (measured on an H200, thirty-third session: five targets, three
// interleaved rounds over the 16 workloads, perf/NOTES.md), by the attention path beside it: the GEMM path 66 of 132
// SMs up to kDwoWideMinTokens tokens (1.005-1.039x at T = 256-898) and 84 from there (1.005-1.030x at T = 2048-4096);
// the small kernels 100 (1.00-1.017x; 66 lost 5-11 % there); the key-major kernel 116 (1.005-1.016x). Elsewhere off.
constexpr int64_t kDwoWideMinTokens = 2048;
int dwo_sm_target(const Context& ctx, int64_t T, bool small_attn, bool kv_attn) {
  const int sms = ctx.sm_count();
  const int of132 = small_attn ? 100 : kv_attn ? 116 : T < kDwoWideMinTokens ? 66 : 84;
  return sm_target_switch("ATTNBWD_CUDA_GQA_DWO_SMS", sms, ctx.cc() == 90 ? sms_of_132(sms, of132) : 0);
}

// ATTNBWD_CUDA_GQA_DWO_GEMM=auto|cublaslt|smallk: how grad_o_weight = dYᵀ·A is computed. cublaslt: one cuBLASLt
// GEMM (with ATTNBWD_CUDA_GQA_DWO_SMS and ATTNBWD_CUDA_GQA_DWO_TUNE). smallk: wgrad_small_k_sm90.cu's kernel (sm_90,
// T ≤ 256, hidden a multiple of 64 and Hq·D of 128), which keeps a column slice of A resident per CTA, streams dY's
// 64-row blocks and stores each block while the other consumer warpgroup's products run, on a grid of part of the SMs:
// ATTNBWD_CUDA_GQA_DWO_SMS's count, whose auto is 64 of 132 here (the small attention kernels take the rest; with
// ATTNBWD_CUDA_GQA_DWO=early dA's GEMM gets the SMs the grid leaves). A probe with grad_o_weight left out measured
// 1.12-1.17x per call at T ≤ 512 (forty-ninth session, perf/NOTES.md); smallk measured 0.91-0.95x at #2, #5, #11 and
// 1.00-1.02x at #13 (H200 and H100): beside it the small path's first attention kernel takes ~2.4x as long, as beside
// cuBLASLt's dWo. auto = cublaslt. smallk where the kernel cannot take the call is an Error naming the switch.
int dwo_gemm_switch() { return env_switch("ATTNBWD_CUDA_GQA_DWO_GEMM", {"auto", "cublaslt", "smallk"}); }

// ATTNBWD_CUDA_GQA_DWO_TUNE=auto|on|off: whether grad_o_weight's cuBLASLt algorithm is timed at its first call like the
// op's other GEMMs (on) or cuBLASLt's first heuristic answer (off; Gemm::first_answer). The tuning times each candidate
// alone on an idle GPU, and late dWo runs beside the attention chain: at #10 (H100, forty-third session) the tuned choice
// (128 x 128 tiles, 4 x 2 clusters; 234.7 against 245.1 µs alone) ran 309.6 µs there against the first answer's 285.3
// (256 x 128, 2 x 4). auto: off (the first answer) for late dWo beside the GEMM attention path from kDwoWideMinTokens
// tokens, on elsewhere. Measured (H100, three interleaved rounds over the 16, off against on): #3 1.020x, #10 1.014x,
// #8 1.006x, #15 1.004x (the GEMM path at T >= 2048); 0.982-0.989x at #1, #2, #4, #11, #13 (small T, where the tuned
// choice wins), ~1.00x beside the key-major kernel (#6, #9, #14). Where the context does not tune
// (ATTNBWD_CUDA_LT_TUNE=off, deterministic calls) every setting is the first answer.
int dwo_tune_switch() { return env_switch("ATTNBWD_CUDA_GQA_DWO_TUNE", {"auto", "on", "off"}); }
bool dwo_first_answer(int sw, bool late, int64_t T, bool small_attn, bool kv_attn) {
  return sw == 2 || (sw == 0 && late && !small_attn && !kv_attn && T >= kDwoWideMinTokens);
}

// ATTNBWD_CUDA_GQA_GROUP=auto|on|off, the GEMM attention path (steps 3-5 as cuBLASLt GEMMs): on: dK₃₂ and dV₃₂ as one
// GEMM per KV head over its group's query heads (dK_j = Σ_g dS_gᵀ·Q_g: the group's dS and Q rows are consecutive, so
// a [G·Sp, ·] operand with K = G·Sp; dV_j = Σ_g P_gᵀ·dO_g likewise where dO is a head-split copy, not the B = 1
// view of dA), the group sum rounded once to bf16 (the reference rounds each head's product, then the sum: within
// the tolerance, and closer to the exact sum: float64 PyTorch), written [B, Hkv, Sp, D], 1/G of the per-head writes
// and of the merge's reads of them. off: one GEMM per query head, summed in the merge. auto = on from
// kGroupMinTokens tokens. Measured (H200, #3: B = 16, S = 256, stages serialised): dV 39 → 35 µs, dQ + dK 78 → 68,
// merge 47 → 38.
bool group_gemms(int64_t T) {
  const int v = env_switch("ATTNBWD_CUDA_GQA_GROUP", {"auto", "on", "off"});
  return v == 1 || (v == 0 && T >= kGroupMinTokens);
}

struct Sm90Proj {
  sm90::LinearBackward p;
  sm90::LinearBackwardPlan plan;
};

// The problem and its plan (both GEMMs in one launch); an Error where the kernel cannot take the call.
Sm90Proj sm90_proj(const Context& ctx, const sm90::LinearBackward& p) {
  const std::string why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_backward_unsupported(p);
  if (!why.empty()) throw Error("ATTNBWD_CUDA_GQA_PROJ", "sm90 kernel cannot take this call: " + why);
  return {p, sm90::linear_backward_plan(p, ctx.sm_count())};
}

// Split-K partials live in scratch slot 1: nothing else uses it (the side stream's cuBLASLt GEMMs have
// their own workspace, Context::lt_workspace).
void sm90_launch(Context& ctx, const Sm90Proj& j, cudaStream_t stream, bool after_own_kernel = false) {
  void* ws = j.plan.workspace_bytes ? ctx.scratch(1, j.plan.workspace_bytes, stream) : nullptr;
  sm90::linear_backward_launch(j.p, j.plan, ws, ctx.counters(j.plan.counters, stream), stream, after_own_kernel);
}

}  // namespace

namespace {

// The whole op on `stream` (and the side stream, joined before returning).
void enqueue_op(Context& ctx, const GqaRopeShape& s, const GqaRopeArgs& a, cudaStream_t stream) {
  const int64_t B = s.batch, S = s.seq_len, T = s.tokens(), HS = s.hidden_size, Hq = s.num_heads,
                Hkv = s.num_kv_heads, D = s.head_dim, QP = s.q_proj_size(), KP = s.kv_proj_size();
  const int64_t QKV = QP + 2 * KP, BH = B * Hq, ld = round_up(S, 8);

  const ProjPath path = proj_path();
  // ATTNBWD_GQA_FUSED=1: the fused dP/softmax kernel where it applies (opt-in: measured slower than the
  // cuBLASLt dP + row kernel on the H200).
  const bool fused_asked = env_switch("ATTNBWD_GQA_FUSED", {"0", "1"}) == 1;
  // Switches read here, before anything is enqueued, so that a malformed value is an Error before any output is written
  // (the others below are read before the first enqueue too).
  const int row_kernel_rows = rows_per_warp();
  const bool overlap = gqa_overlap();
  const bool pv_on_side = pv_side();
  const bool kvw_early = kvw_under();
  const int dwqkv = dwqkv_switch();  // 0 auto (= batch where it applies), 1 apart, 2 batch
  const int dxsum = dx_sum_switch();
  const bool dk_on_side = dk_side();
  const int kvdq_mode = kvdq_switch();  // 0 auto (= on where the pass can take the call), 1 off, 2 on
  const int dkdv = dkdv_switch();  // 0 auto, 1 apart, 2 batch
  const int small_pdl_mode = small_pdl_switch();
  const int small_pdl = small_pdl_mode == 2 ? 0 : small_pdl_mode == 3 ? 2 : 1;  // GqaSmallAttn::pdl
  const bool dkdv_batch_asked = dkdv == 2;
  const int dwo_tune = dwo_tune_switch();
  bool da_rows_auto = false;
  const int64_t da_rows = da_rows_switch(ctx, T, &da_rows_auto);
  const DaPath da_switch = da_path();
  const bool merge_scalar_switch = merge_scalar();
  const int pdl = pdl_switch();
  const bool thin_pdl_switch = pdl != 1, grouped_pdl_switch = pdl == 0;
  // Padding (S % 8 != 0, cuBLASLt projections, 16-byte aligned inputs, not the small kernels' path): the attention
  // buffers have Sp = S8 rows per head and P gets a padded copy; otherwise Sp = S.
  const int64_t S8 = round_up(S, 8);
  const auto c = [](const bf16* p) { return reinterpret_cast<const bf*>(p); };
  const auto m = [](bf16* p) { return reinterpret_cast<bf*>(p); };
  const bf* P = c(a.attn_weights.data);
  const bf* Q = c(a.query_states.data);
  const bf* K = c(a.key_states.data);
  const bf* V = c(a.value_states.data);
  const AttnPath asked = attn_path();
  // auto's small range, where the inputs suit the kernels (gqa_small_attn_inputs_unsupported: else the padded GEMM
  // path as before); the kernels' conditions on the scratch are checked below, and where they refuse the call auto
  // takes the GEMM path unpadded (as ATTNBWD_CUDA_GQA_PAD=off)
  const bool small_auto = asked == AttnPath::Auto && S <= kSmallMaxSeq && T <= kSmallMaxTokens && !fused_asked &&
                          gqa_small_attn_inputs_unsupported(D, BH, Q, K, V).empty();
  const AttnPath attn = small_auto ? AttnPath::Small : asked;
  const bool pad = S8 != S && !pad_switch_off() && path != ProjPath::Sm90 && !fused_asked && attn != AttnPath::Small &&
                   aligned16(Q) && aligned16(K) && aligned16(V) && D % 8 == 0;
  const int64_t Sp = pad ? S8 : S;

  // Scratch (slot 0), every piece a multiple of 8 elements: dA | Qp | dO | dS | Pp | dQ32 | dK32 | dV32 | dQKVp | dXk |
  // dXv | Kp | Vp (Qp, Pp, Kp, Vp with padding only), then r (fp32, the kv path's) and the DA=heads pointers. Qp | dO,
  // dS | Pp and dK32 | dV32 are adjacent: ATTNBWD_CUDA_GQA_DKDV=batch's strided batch reads and writes each pair as one
  // array.
  const int64_t n_head = round_up(T * QP, 8), n_hp = round_up(BH * Sp * D, 8), n_ds = round_up(BH * Sp * ld, 8),
                n_qkv = round_up(T * QKV, 8), n_x = round_up(T * HS, 8), n_pp = pad ? round_up(BH * S8 * S8, 8) : 0;
  const int64_t n_r = round_up(2 * BH * S, 8);  // fp32 r of the kv path (two bf16 slots per float)
  // ATTNBWD_CUDA_GQA_DA=heads (or auto's): the pointer-array batch's 3·BH matrix addresses (four bf16 slots per pointer)
  const int64_t n_ptr = da_switch == DaPath::Heads || da_switch == DaPath::Auto ? round_up(3 * BH * 4, 8) : 0;
  // ATTNBWD_CUDA_GQA_DWQKV=batch (or auto's): the listed batch's 3·(G + 2) addresses (four bf16 slots per pointer)
  const int64_t n_wptr = dwqkv != 1 ? round_up(3 * kMaxListed * 4, 8) : 0;
  const int64_t total =
      n_head + 4 * n_hp + n_ds + n_qkv + 2 * n_x + (pad ? n_pp + 3 * n_hp : 0) + n_r + n_ptr + n_wptr;
  bf* base = static_cast<bf*>(ctx.scratch(0, static_cast<std::size_t>(total) * sizeof(bf), stream));
  const int64_t n_qp = pad ? n_hp : 0;
  bf* dA = base;
  bf* Qp = dA + n_head;
  bf* dO = Qp + n_qp;
  bf* dS = dO + n_hp;
  bf* Pp = dS + n_ds;
  bf* dQ32 = Pp + n_pp;
  bf* dK32 = dQ32 + n_hp;
  bf* dV32 = dK32 + n_hp;
  bf* dQKVp = dV32 + n_hp;
  bf* dXk = dQKVp + n_qkv;
  bf* dXv = dXk + n_x;
  bf* Kp = dXv + n_x;
  bf* Vp = Kp + n_hp;
  float* rbuf = reinterpret_cast<float*>(base + total - n_r - n_ptr - n_wptr);  // after Vp where it exists
  void** da_ptrs = reinterpret_cast<void**>(base + total - n_ptr - n_wptr);     // after r (heads only)
  void** dw_ptrs = reinterpret_cast<void**>(base + total - n_wptr);             // after those (DWQKV auto, batch)

  // The projection paths, decided here, before anything is enqueued (a forced path that cannot take the call
  // is an Error): step 9's pairs (dX{q,k,v} = dXp·W, grad_{q,k,v}_weight = dXpᵀ·Xh) as one grouped sm_90a
  // launch, three sm_90a launches, or cuBLASLt with the weight gradients on the side stream; the o pair
  // (steps 1-2) as one sm_90a launch or cuBLASLt.
  const bool all_sm90 = path == ProjPath::Sm90;
  const QkvPath qkv = qkv_path();
  // The three pairs as one grouped problem: dX = Σ_s dXp_s·W_s plain [T, HS] into grad_hidden_states, dW by segment.
  const auto qkv_pairs = [&] {
    sm90::LinearBackward q;
    q.grad_output = dQKVp, q.input = a.hidden_states.data, q.grad_input = a.grad_hidden_states.data;
    q.out_features = QKV, q.in_features = HS, q.ld_grad_output = QKV;
    q.batch = 1, q.seq_len = T, q.heads = 1, q.head_dim = HS;
    q.segments = 3;
    q.seg_weight[0] = a.q_weight.data, q.seg_weight[1] = a.k_weight.data, q.seg_weight[2] = a.v_weight.data;
    q.seg_grad_weight[0] = a.grad_q_weight.data, q.seg_grad_weight[1] = a.grad_k_weight.data;
    q.seg_grad_weight[2] = a.grad_v_weight.data;
    q.seg_rows[0] = QP, q.seg_rows[1] = KP, q.seg_rows[2] = KP;
    return q;
  };
  Sm90Proj gj;  // grouped or thin: the three pairs in one launch, dX straight into grad_hidden_states (thin: gj.p)
  bool grouped = false, thin = false;
  sm90::ThinPlan thin_plan;
  if (qkv == QkvPath::Grouped || qkv == QkvPath::Thin ||
      (qkv == QkvPath::Auto && path == ProjPath::Auto && T <= kGroupedMaxTokens && ctx.cc() == 90)) {
    const sm90::LinearBackward q = qkv_pairs();
    const std::string thin_why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_thin_unsupported(q);
    if (qkv == QkvPath::Thin || (qkv == QkvPath::Auto && T >= kThinMinTokens && thin_why.empty())) {
      if (!thin_why.empty())
        throw Error("ATTNBWD_CUDA_GQA_QKV", "thin sm90 launch cannot take this call: " + thin_why);
      thin = true;
      gj.p = q, thin_plan = sm90::linear_thin_plan(q, ctx.sm_count());
    } else {
      const std::string why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_backward_unsupported(q);
      if (!why.empty() && qkv == QkvPath::Grouped)
        throw Error("ATTNBWD_CUDA_GQA_QKV", "grouped sm90 launch cannot take this call: " + why);
      grouped = why.empty();  // auto: the separate GEMMs where the kernel cannot take the call
      if (grouped) gj = {q, sm90::linear_backward_plan(q, ctx.sm_count())};
    }
  }
  // groupeddx (QkvPath::GroupedDx above): dX of the three pairs as one grouped dX-only sm_90a launch, the weight
  // gradients by cuBLASLt on the side stream (step 9).
  Sm90Proj gdx;
  bool grouped_dx = false;
  const bool gdx_auto = qkv == QkvPath::Auto && path == ProjPath::Auto && !grouped && !thin && ctx.cc() == 90 &&
                        T >= kGroupedDxMinTokens &&
                        sm90::linear_backward_dx_fill(qkv_pairs(), ctx.sm_count()) >= kGroupedDxMinFill;
  if (qkv == QkvPath::GroupedDx && all_sm90)
    throw Error("ATTNBWD_CUDA_GQA_QKV", "groupeddx takes the weight gradients from cuBLASLt: not with "
                                         "ATTNBWD_CUDA_GQA_PROJ=sm90");
  if ((qkv == QkvPath::GroupedDx || gdx_auto) && !all_sm90) {
    const sm90::LinearBackward q = qkv_pairs();
    const std::string why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_backward_unsupported(q);
    if (!why.empty() && !gdx_auto)
      throw Error("ATTNBWD_CUDA_GQA_QKV", "grouped sm90 launch cannot take this call: " + why);
    grouped_dx = why.empty();  // auto: the separate GEMMs where the kernel cannot take the call
    // Unsplit: at T = 2048 the planner's two-way split measured 0.97-0.98x of the separate path, unsplit 1.012-1.017x.
    if (grouped_dx) gdx = {q, sm90::linear_backward_plan_dx_only(q, ctx.sm_count(), ctx.sm_count(), /*max_splits=*/1)};
  }
  Sm90Proj pj[3];
  if (all_sm90 && !grouped && !thin) {
    const void* wt[3] = {a.q_weight.data, a.k_weight.data, a.v_weight.data};
    void* gw[3] = {a.grad_q_weight.data, a.grad_k_weight.data, a.grad_v_weight.data};
    void* gx[3] = {a.grad_hidden_states.data, dXk, dXv};
    const int64_t off[3] = {0, QP, QP + KP}, outf[3] = {QP, KP, KP};
    for (int i = 0; i < 3; ++i) {
      sm90::LinearBackward q;
      q.grad_output = dQKVp + off[i], q.input = a.hidden_states.data, q.weight = wt[i];
      q.grad_input = gx[i], q.grad_weight = gw[i];
      q.out_features = outf[i], q.in_features = HS, q.ld_grad_output = QKV;
      q.batch = B, q.seq_len = S, q.heads = 1, q.head_dim = HS;  // dX plain [T, HS]
      pj[i] = sm90_proj(ctx, q);
    }
  }
  // dA by the thin kernel's dX-only form (ATTNBWD_CUDA_GQA_DA), on the cuBLASLt o path: dA plain [T, QP].
  sm90::LinearBackward da;
  sm90::ThinPlan da_plan;
  bool da_thin = false;
  if (!all_sm90) {
    const DaPath dap = da_switch;
    da.grad_output = a.grad_output.data, da.weight = a.o_weight.data, da.grad_input = dA;
    da.out_features = HS, da.in_features = QP;
    da.batch = 1, da.seq_len = T, da.heads = 1, da.head_dim = QP;  // dX plain [T, QP]; no X, no dW
    const std::string why = ctx.cc() != 90 ? "not an sm_90 device" : sm90::linear_thin_unsupported(da);
    if (dap == DaPath::Thin && !why.empty())
      throw Error("ATTNBWD_CUDA_GQA_DA", "thin sm90 launch cannot take this call: " + why);
    da_thin = dap == DaPath::Thin;
    if (da_thin) da_plan = sm90::linear_thin_plan(da, ctx.sm_count(), /*dx_only=*/true);
  }
  Sm90Proj oj;  // the o pair in one launch, writing dO [B,H,S,D] directly
  if (all_sm90) {
    sm90::LinearBackward o;
    o.grad_output = a.grad_output.data, o.input = a.attn_output.data, o.weight = a.o_weight.data;
    o.grad_input = dO, o.grad_weight = a.grad_o_weight.data;
    o.out_features = HS, o.in_features = QP;
    o.batch = B, o.seq_len = S, o.heads = Hq, o.head_dim = D;
    oj = sm90_proj(ctx, o);
  }
  // dO for steps 3-5: [B,H,Sp,D] (a head-split or padded copy of dA, or the sm_90a o pair's output), or for
  // B = 1 on the cuBLASLt path without padding dA itself (head h at columns h·D, row stride QP;
  // ATTNBWD_CUDA_GQA_DO).
  const bool do_view = !all_sm90 && !pad && B == 1 && !do_split();
  const bf* dOp = do_view ? dA : dO;
  const int64_t ld_do = do_view ? QP : D, head_do = do_view ? D : Sp * D;
  // ATTNBWD_CUDA_GQA_DA=heads: dA straight into dO where the op would copy it there (head_split below); auto's from
  // S = kDaHeadsMinSeq on sm_90, as one batch unless ATTNBWD_CUDA_GQA_DA_ROWS is asked for by name
  const bool heads_fit = !all_sm90 && !pad && !do_view;
  const bool da_heads_auto = da_switch == DaPath::Auto && heads_fit && ctx.cc() == 90 && S >= kDaHeadsMinSeq;
  const bool da_heads = da_switch == DaPath::Heads || da_heads_auto;
  if (da_switch == DaPath::Heads && !heads_fit)
    throw Error("ATTNBWD_CUDA_GQA_DA", "heads: dA written straight into the head-split dO where the op copies it there "
                                       "(B > 1 or ATTNBWD_CUDA_GQA_DO=split, S % 8 == 0 or ATTNBWD_CUDA_GQA_PAD=off, the "
                                       "cuBLASLt o path), not taken here");
  // The attention path (steps 3-5): the small-S kernels, the key-major sm_90a kernel or GEMMs.
  const int64_t G = Hq / Hkv;
  GqaKvAttn kv;
  GqaSmallAttn sm;
  bool use_kv = false, use_ws = false, use_small = false;
  bool kv_mid = false;  // auto's key-major choice below S = kKvMinSeq: taken only with the dQ pass
  if (attn == AttnPath::Small) {
    sm.dO = dOp, sm.do_ld = ld_do, sm.do_head = head_do;
    sm.Q = Q, sm.K = K, sm.V = V, sm.P = P, sm.dS = dS, sm.ld = ld, sm.dQ = dQ32, sm.dK = dK32, sm.dV = dV32;
    sm.BH = BH, sm.S = S, sm.D = D, sm.scaling = static_cast<float>(a.scaling);
    sm.split = env_switch("ATTNBWD_CUDA_GQA_SMALL_SPLIT", {"auto", "off"}) == 1 ? 1 : 2;
    if (pv_on_side) sm.O = dK32;  // r from O (ATTNBWD_CUDA_GQA_PV=side), checked with the rest
    sm.pdl = small_pdl;
    std::string why = gqa_small_attn_unsupported(sm);
    if (why.empty() && fused_asked) why = "the fused dP kernel was asked for";
    if (!why.empty() && !small_auto) throw Error("ATTNBWD_CUDA_GQA_ATTN", "small kernels cannot take this call: " + why);
    use_small = why.empty();  // auto where they cannot: the GEMM path (unpadded, as ATTNBWD_CUDA_GQA_PAD=off)
    if (use_small && merge_mode() == 2) {  // steps 6-8 in the kernels' epilogues where they can write them
      GqaSmallAttn mg = sm;
      mg.merged = dQKVp, mg.ldm = QKV, mg.cos = c(a.cos.data), mg.sin = c(a.sin.data), mg.Hq = Hq, mg.Hkv = Hkv;
      if (const std::string no = gqa_small_attn_merge_unsupported(mg); !no.empty())
        throw Error("ATTNBWD_CUDA_GQA_MERGE", "the small kernels cannot write the merged form: " + no);
      sm = mg;
    }
  } else if (attn != AttnPath::Gemm) {
    kv.dO = dOp, kv.do_ld = ld_do, kv.do_head = head_do;
    kv.Q = Q, kv.V = V, kv.P = P, kv.r = rbuf, kv.dS_t = dS, kv.dK = dK32, kv.dV = dV32;
    kv.BH = BH, kv.S = S, kv.D = D, kv.scaling = static_cast<float>(a.scaling);
    const auto unsupported = [&](bool ws) {
      std::string why = ws ? gqa_kv_attn_ws_unsupported(kv, ctx.cc()) : gqa_kv_attn_unsupported(kv, ctx.cc());
      if (why.empty() && (fused_asked || pad)) why = "the fused dP kernel or padding was asked for";
      return why;
    };
    if (attn == AttnPath::Auto) {  // the warp-specialised form where it applies, else the one-warpgroup kernel
      if (S >= kKvMinSeq && T <= kKvMaxTokens) {
        use_ws = unsupported(true).empty();
        use_kv = use_ws || unsupported(false).empty();
      } else if (S >= kKvMidMinSeq && T >= kKvMidMinTokens && T <= kKvMaxTokens && kvdq_mode != 1 && !pv_on_side) {
        kv_mid = use_ws = use_kv = unsupported(true).empty();  // and only with the dQ pass (below)
      }
    } else {
      use_ws = attn == AttnPath::KvWs;
      const std::string why = unsupported(use_ws);
      if (!why.empty()) throw Error("ATTNBWD_CUDA_GQA_ATTN", "kv kernel cannot take this call: " + why);
      use_kv = true;
    }
  }
  // r and dQ by the dQ pass (ATTNBWD_CUDA_GQA_KVDQ, above) where the warp-specialised key-major kernel runs and the pass
  // can take the call (auto keeps the dQ GEMM where it cannot; on is then an Error, raised here, before any work).
  // ATTNBWD_CUDA_GQA_PV=side asks for r from O, which the pass does not read: auto then keeps the dQ GEMM (the switch
  // set by name wins over auto's choice) and on is an Error.
  if (use_ws && pv_on_side && kvdq_mode == 2)
    throw Error("ATTNBWD_CUDA_GQA_KVDQ", "on: the dQ pass forms r itself, from P and dP, and ATTNBWD_CUDA_GQA_PV=side "
                                        "asks for r from O (set one of them)");
  GqaDpSoftmax dqp;
  bool kvdq = false;
  if (use_ws && kvdq_mode != 1 && !pv_on_side) {
    dqp.dO = kv.dO, dqp.do_ld = kv.do_ld, dqp.do_head = kv.do_head, dqp.V = kv.V, dqp.P = kv.P;
    dqp.BH = BH, dqp.S = S, dqp.Sp = S, dqp.D = D, dqp.ld_ds = S, dqp.scaling = static_cast<float>(a.scaling);
    dqp.K = K, dqp.dQ = dQ32, dqp.r_out = rbuf;
    const std::string why = gqa_dp_softmax_unsupported(dqp, ctx.cc());
    if (!why.empty() && kvdq_mode == 2 && !kv_mid)
      throw Error("ATTNBWD_CUDA_GQA_KVDQ", "the dQ pass cannot take this call: " + why);
    kvdq = why.empty();
  }
  if (kv_mid && !kvdq) use_kv = use_ws = false;  // auto's GEMM path there (the key-major path wins only with the pass)
  // Steps 3-4 of the GEMM attention path as one query-major sm_90a kernel (ATTNBWD_CUDA_GQA_DPSM, above).
  GqaDpSoftmax dq;
  const int dpsm = dpsm_switch();
  dq.dO = dOp, dq.do_ld = ld_do, dq.do_head = head_do, dq.V = pad ? Vp : V, dq.P = P, dq.dS = dS, dq.ld_ds = ld;
  dq.O = pv_on_side ? dK32 : nullptr;  // r from O (ATTNBWD_CUDA_GQA_PV=side)
  dq.Pp = pad ? Pp : nullptr, dq.BH = BH, dq.S = S, dq.Sp = Sp, dq.D = D, dq.scaling = static_cast<float>(a.scaling);
  dq.wide = dpsm == 3;
  dq.three_ctas = dpsm == 4;
  bool use_dpsm = dpsm == 1 || dpsm == 3 || dpsm == 4;
  if (use_dpsm) {
    if (use_small || use_kv || fused_asked)
      throw Error("ATTNBWD_CUDA_GQA_DPSM", "the dP + softmax kernel belongs to the GEMM attention path, not taken here "
                                           "(the small or key-major kernels, or ATTNBWD_GQA_FUSED)");
    if (const std::string why = gqa_dp_softmax_unsupported(dq, ctx.cc()); !why.empty())
      throw Error("ATTNBWD_CUDA_GQA_DPSM", "dP + softmax kernel cannot take this call: " + why);
  } else if (dpsm == 0 && pad && !use_small && !use_kv && !fused_asked) {  // auto: the narrow form (dq.wide false)
    use_dpsm = gqa_dp_softmax_one_wave(dq, ctx.sm_count()) && gqa_dp_softmax_unsupported(dq, ctx.cc()).empty();
  }
  // O = bf16(P·V) on the side stream from the op's start (ATTNBWD_CUDA_GQA_PV=side), into dK32 (free until the key-major
  // kernel writes it, or the small path's second kernel after its griddepcontrol.wait, when the first has read O).
  const int pv_target = pv_sm_target(ctx, use_kv, S, HS);  // (a malformed value is an Error on any path)
  if (pv_on_side && !use_small && !use_kv && !use_dpsm)
    throw Error("ATTNBWD_CUDA_GQA_PV", "side: the GEMM attention path without the dP + softmax kernel takes no O (the "
                                       "row kernel, ATTNBWD_GQA_FUSED's kernel, or auto's fallback where the small "
                                       "kernels refuse; side needs the key-major kernel, the small kernels or "
                                       "ATTNBWD_CUDA_GQA_DPSM's kernel)");
  const int kvw_target = kvw_sm_target(ctx);  // (a malformed value is an Error on any path)
  // step 9's weight gradients by cuBLASLt on the side stream (the separate or groupeddx q/k/v path)
  const bool lt_dw = !all_sm90 && !grouped && !thin;
  if (kvw_early && (!use_kv || !lt_dw))
    throw Error("ATTNBWD_CUDA_GQA_KVW", "under: needs the key-major attention kernel and cuBLASLt weight gradients (the "
                                        "separate or groupeddx q/k/v path), not taken here");
  const int dq_sms = kvw_early ? sms_beside(ctx.sm_count(), kvw_target) : 0;
  const bool dw_batch_fits = lt_dw && !kvw_early && QP % KP == 0 && QP / KP + 2 <= kMaxListed;
  if (dwqkv == 2 && !dw_batch_fits)
    throw Error("ATTNBWD_CUDA_GQA_DWQKV", "batch: needs the cuBLASLt q/k/v weight gradients (the separate or groupeddx "
                                          "q/k/v path), not ATTNBWD_CUDA_GQA_KVW=under, and at most " +
                                              std::to_string(kMaxListed - 2) + " query heads per KV head");
  const bool dw_batch = dwqkv != 1 && dw_batch_fits;  // auto = batch where it fits (sixtieth session's A/B)
  const bool separate_lt = lt_dw && !grouped_dx;  // step 9 by three cuBLASLt dX GEMMs
  if (dxsum == 2 && !separate_lt)
    throw Error("ATTNBWD_CUDA_GQA_DXSUM", "acc: the separate cuBLASLt q/k/v path forms the sum, not taken here (the "
                                           "grouped, thin or groupeddx launches sum dX themselves; or "
                                           "ATTNBWD_CUDA_GQA_PROJ=sm90)");
  const bool dxsum_acc = separate_lt && dxsum != 1;
  if (pv_on_side && !use_kv)
    if (const std::string why = gqa_pv_unsupported(P, V, dK32, S, BH, D); !why.empty())
      throw Error("ATTNBWD_CUDA_GQA_PV", "side: the O kernel cannot take this call: " + why);
  // Group GEMMs for dK32 / dV32 (ATTNBWD_CUDA_GQA_GROUP): the GEMM attention path only, dV32 only where dO is a
  // head-split (or padded) copy [B, Hq, Sp, D], whose group rows are consecutive.
  const bool gemm_attn = !use_small && !use_kv;
  const bool k_summed = gemm_attn && G > 1 && group_gemms(T);
  const bool v_summed = k_summed && !do_view;
  StageTimer stages(stream);
  const cudaStream_t side = stages.side_or_main(ctx.side_stream());
  // 1-2. dA = dY·Wo split into heads (dO), grad_o_weight = dYᵀ·A: one sm_90a launch writing dO
  // directly, or cuBLASLt dWo on the side stream and dA by cuBLASLt + a head-split (or pad) kernel (none for
  // the view).
  bool forked = false;  // work on the side stream, joined at the end
  const bool late = !all_sm90 && dwo_late();
  if (dk_on_side && !(gemm_attn && late && pad && overlap))
    throw Error("ATTNBWD_CUDA_GQA_DKSIDE", "on: the padded GEMM attention path with late grad_o_weight and two streams "
                                            "queues dK32 there, not taken here (the small or key-major kernels, S % 8 == "
                                            "0, ATTNBWD_CUDA_GQA_DWO=early or ATTNBWD_CUDA_GQA_OVERLAP=off)");
  // DKDV=batch (auto's where it runs): dK32 and dV32 on one stream, both from padded operands (with padding
  // v_summed == k_summed)
  const bool dkdv_batched = dkdv != 1 && gemm_attn && pad && !dk_on_side;
  if (dkdv_batch_asked && !dkdv_batched)
    throw Error("ATTNBWD_CUDA_GQA_DKDV", "batch: dK32 and dV32 as one batch on the padded GEMM attention path only, not "
                                         "taken here (S % 8 == 0 or padding off, the small or key-major kernels, or "
                                         "ATTNBWD_CUDA_GQA_DKSIDE=on)");
  // summed over the group, the batch's second half of C starts B·Hkv heads after dK32 (the merge reads dV32 there)
  if (dkdv_batched && k_summed) dV32 = dK32 + B * Hkv * Sp * D;
  // early dWo shares the GPU with dA, which is on the critical path: all SMs there
  const int dwo_target = dwo_sm_target(ctx, T, use_small, use_kv);  // (a malformed value is an Error on any path)
  const int dwo_sms = all_sm90 || !late ? 0 : dwo_target;
  const bool dwo_first = dwo_first_answer(dwo_tune, late, T, use_small, use_kv);
  // grad_o_weight by the small-K kernel (ATTNBWD_CUDA_GQA_DWO_GEMM=smallk), refused here before any output is written
  sm90::SmallKWgrad dwo_sk;
  dwo_sk.a = a.grad_output.data, dwo_sk.b = a.attn_output.data, dwo_sk.c = a.grad_o_weight.data;
  dwo_sk.M = HS, dwo_sk.N = QP, dwo_sk.K = T, dwo_sk.lda = HS, dwo_sk.ldb = QP;
  const bool dwo_smallk = dwo_gemm_switch() == 2;
  int dwo_sk_ctas = 0;
  if (dwo_smallk) {
    const std::string why = ctx.cc() != 90 ? std::string("the device is not sm_90")
                            : all_sm90 ? std::string("ATTNBWD_CUDA_GQA_PROJ=sm90 computes grad_o_weight in its pair")
                                       : sm90::small_k_wgrad_unsupported(dwo_sk);
    if (!why.empty()) throw Error("ATTNBWD_CUDA_GQA_DWO_GEMM", "smallk: " + why);
    const int sms = ctx.sm_count();
    dwo_sk_ctas = sm_target_switch("ATTNBWD_CUDA_GQA_DWO_SMS", sms, sms_of_132(sms, 64));
    if (dwo_sk_ctas == 0) dwo_sk_ctas = sms;
  }
  const auto dwo_gemm = [&] {  // grad_o_weight = dYᵀ·A on the side stream
    if (dwo_smallk) {
      sm90::small_k_wgrad_launch(dwo_sk, dwo_sk_ctas, side);
      stages.mark("dWo_smallk");
      return;
    }
    Gemm g;
    g.trans_a = true;
    g.M = HS, g.N = QP, g.K = T, g.lda = HS, g.ldb = QP, g.ldc = QP;
    g.sm_target = dwo_sms;
    g.first_answer = dwo_first;
    gemm(ctx, 1, side, g, a.grad_output.data, a.attn_output.data, a.grad_o_weight.data);
    stages.mark("dWo");
  };
  // The key-major path's per-head products, [S, S]·[S, D] for each of the BH query heads: O = P·V, and with trans_a
  // dQ = (dSᵀ)ᵀ·K.
  const auto per_head = [&] {
    Gemm g;
    g.M = S, g.N = D, g.K = S, g.lda = S, g.ldb = D, g.ldc = D, g.count = static_cast<int>(BH), g.stride_a = S * S,
    g.stride_b = S * D, g.stride_c = S * D;
    return g;
  };
  // O = bf16(P·V) per query head (P [BH, S, S], V [BH, S, 128]: the inputs, before any padding copy): cuBLASLt on the
  // key-major path (S % 64 == 0), else (on the side stream only) gqa_pv_launch's kernel, which takes P at any alignment.
  const auto pv_gemm = [&](int slot, cudaStream_t st, int sms) {
    Gemm g = per_head();
    g.sm_target = sms;
    gemm(ctx, slot, st, g, P, V, dK32);
  };
  // One weight gradient of step 9 on the side stream, grad_w = dXp[:, off, +rows]ᵀ·Xh: the same description wherever it
  // is queued (step 9, or grad_k/v_weight right after the key-major kernel with ATTNBWD_CUDA_GQA_KVW=under), and per
  // GEMM of ATTNBWD_CUDA_GQA_DWQKV=batch's listed batch.
  const auto dw_desc = [&](int64_t rows) {
    Gemm g;
    g.trans_a = true;
    g.M = rows, g.N = HS, g.K = T, g.lda = QKV, g.ldb = HS, g.ldc = HS;
    return g;
  };
  const auto dw_gemm = [&](int64_t off, int64_t rows, void* grad_w, int sms) {
    Gemm g = dw_desc(rows);
    g.sm_target = sms;
    gemm(ctx, 1, side, g, dQKVp + off, a.hidden_states.data, grad_w);
  };
  // Steps 6-8 (the merge pass) on stream st: part 0 every slot, 1 the q slots (Hkv = 0), 2 the k and v slots.
  const auto merge_launch = [&](cudaStream_t st, int part) {
    const bool vec = D % 16 == 0 && QKV % 8 == 0 && aligned16(a.cos.data) && aligned16(a.sin.data) && !merge_scalar_switch;
    const bool g4 = Hq == 4 * Hkv;
    const auto merge = part == 2 ? (vec ? (g4 ? gqa_rope_merge<8, 4, true> : gqa_rope_merge<8, 0, true>)
                                        : (g4 ? gqa_rope_merge<1, 4, true> : gqa_rope_merge<1, 0, true>))
                                 : (vec ? (g4 ? gqa_rope_merge<8, 4> : gqa_rope_merge<8, 0>)
                                        : (g4 ? gqa_rope_merge<1, 4> : gqa_rope_merge<1, 0>));
    const int64_t slots = part == 0 ? Hq + 2 * Hkv : part == 1 ? Hq : 2 * Hkv;
    const int64_t items = T * slots * (D / 2 / (vec ? 8 : 1));
    const int threads = 256;
    merge<<<blocks_for(items, threads), threads, 0, st>>>(dQ32, dK32, dV32, c(a.cos.data), c(a.sin.data), dQKVp, T, S, Sp,
                                                         static_cast<int>(Hq), part == 1 ? 0 : static_cast<int>(Hkv),
                                                         static_cast<int>(D), QKV, k_summed, v_summed);
    ATTNBWD_CUDA_CHECK_LAUNCH();
  };
  // dA's SM target beside O on the side stream: the SMs O leaves; beside early grad_o_weight by the small-K kernel, the
  // SMs its grid leaves.
  const int da_sms = pv_on_side            ? sms_beside(ctx.sm_count(), pv_target)
                     : dwo_smallk && !late ? sms_beside(ctx.sm_count(), sm90::small_k_wgrad_grid(dwo_sk, dwo_sk_ctas))
                                           : 0;
  if (pv_on_side) {
    stages.fork(ctx);
    forked = true;
    if (use_kv)
      pv_gemm(1, side, pv_target);
    else
      // (its bits do not depend on its grid: on one stream, where nothing runs beside it, every SM)
      gqa_pv_launch(P, V, dK32, S, BH, D,
                    pv_target > 0 && !stages.single_stream() ? pv_target : ctx.sm_count(), side);
    stages.mark("PV");
    stages.mark_side(ctx);  // the attention waits for O alone (wait_side_mark), not for what the side stream does next
  }
  if (all_sm90) {
    sm90_launch(ctx, oj, stream);
  } else {
    if (!late) {
      stages.fork(ctx);
      forked = true;
      dwo_gemm();
    }
    if (da_thin) {
      // Scratch slot 1 holds the partials of every sm_90a launch of the call, one after another on this stream: sized
      // here for the largest, so that it does not grow between them.
      std::size_t slot1 = std::max(da_plan.workspace_bytes, thin ? thin_plan.workspace_bytes : 0);
      if (grouped) slot1 = std::max(slot1, gj.plan.workspace_bytes);
      void* ws = slot1 ? ctx.scratch(1, slot1, stream) : nullptr;
      sm90::linear_thin_launch(da, da_plan, ws, stream);
    } else if (da_heads) {
      // dO[b, h] = dY_b·Wo[:, h·D..] for the B·Hq pairs, one pointer-array batch (in pieces of whole batch elements of
      // at most da_rows rows where ATTNBWD_CUDA_GQA_DA_ROWS cuts dA; at least one element each)
      HeadsGemm h;
      h.dy = c(a.grad_output.data), h.w = c(a.o_weight.data), h.out = dO;
      h.B = B, h.S = S, h.H = Hq, h.D = D, h.K = HS, h.ldw = QP;
      h.batches_per_piece = da_rows > 0 && !(da_heads_auto && da_rows_auto) ? std::max<int64_t>(1, da_rows / S) : 0;
      h.sm_target = da_sms;
      gemm_into_heads(ctx, 0, stream, h, da_ptrs);
      stages.mark("dA_heads");  // (the split shows which form ran; o_proj then holds nothing)
    } else {
      const int64_t chunk = da_rows > 0 && da_rows < T ? da_rows : T;
      for (int64_t r0 = 0; r0 < T; r0 += chunk) {  // one GEMM unless ATTNBWD_CUDA_GQA_DA_ROWS cuts it
        Gemm g;
        g.M = std::min(chunk, T - r0), g.N = QP, g.K = HS, g.lda = HS, g.ldb = QP, g.ldc = QP;
        g.sm_target = da_sms;
        gemm(ctx, 0, stream, g, a.grad_output.data + r0 * HS, a.o_weight.data, dA + r0 * QP);
      }
    }
    if (pad) {  // dO and copies of Q, K, V, each [B, Hq, S8, D] with zero pad rows, in one launch
      const PadHeads copies[4] = {{dA, dO, Hq, S * QP, QP, D},
                                  {Q, Qp, Hq, Hq * S * D, D, S * D},
                                  {K, Kp, Hq, Hq * S * D, D, S * D},
                                  {V, Vp, Hq, Hq * S * D, D, S * D}};
      pad_heads(copies, 4, B, S, S8, D, stream);
      Q = Qp, K = Kp, V = Vp;
    } else if (!do_view && !da_heads) {
      head_split(dA, dO, T, S, Hq, D, stream);  // D % 8 == 0, scratch pieces 16-byte aligned: 16-byte moves
    }
  }
  stages.mark("o_proj");
  const float scaling = static_cast<float>(a.scaling);
  const int count = static_cast<int>(BH);

  if (late && (use_small || use_kv)) {  // dWo beside the main stream's attention kernels
    stages.fork(ctx);
    forked = true;
    dwo_gemm();
  }
  if (use_small) {
    // 3-5 as two launches (dS and dQ; then dK32 and dV32), on the main stream; with O on the side stream, after it.
    if (pv_on_side) stages.wait_side_mark(ctx);
    gqa_small_attn_launch(sm, stream);
    // (the name shows which form ran)
    static const char* const kSmallStage[2][3] = {
        {"small_attn_plain", "small_attn", "small_attn_late"},
        {"small_attn_merged_plain", "small_attn_merged", "small_attn_merged_late"}};
    stages.mark(kSmallStage[sm.merged != nullptr][sm.pdl]);
  } else if (use_kv) {
    // 3-5 key-major: O = bf16(P·V) (into dK32, free until the kernel writes it), r = Σ dO⊙O, then the kernel
    // (dSᵀ into dS, dK32, dV32), then dQ = dS·K = (dSᵀ)ᵀ·K.
    // ATTNBWD_CUDA_GQA_KVDQ (kvdq, planned above): r and dQ by one query-major pass, no dSᵀ, no dQ GEMM below.
    if (pv_on_side)
      stages.wait_side_mark(ctx);  // O, queued on the side stream at the op's start
    else if (!kvdq)
      pv_gemm(0, stream, 0);
    GqaKvAttn kvw = kv;
    if (kvdq) {
      gqa_dp_softmax_launch(dqp, stream);
      stages.mark("r_dQ");
      kvw.dS_t = nullptr;
    } else {
      const int threads = 256;
      row_dot128<<<blocks_for(BH * S, threads / 32), threads, 0, stream>>>(kv.dO, kv.do_ld, kv.do_head, dK32, rbuf,
                                                                           BH * S, S);
      ATTNBWD_CUDA_CHECK_LAUNCH();
      stages.mark("r");
    }
    if (use_ws)
      gqa_kv_attn_ws_launch(kvw, stream);
    else
      gqa_kv_attn_launch(kv, stream);
    stages.mark("kv");
    if (kvw_early) {  // the merge's k/v half here, then grad_k/v_weight on the side stream beside the dQ GEMM
      // (the k/v half on this stream: it is DRAM-bound as the dQ GEMM is, so nothing is gained beside it, and step 9's
      // dX then waits for no side-stream work, e.g. a late dWo still running there)
      merge_launch(stream, 2);
      stages.fork(ctx);
      forked = true;
      dw_gemm(QP, KP, a.grad_k_weight.data, kvw_target);
      dw_gemm(QP + KP, KP, a.grad_v_weight.data, kvw_target);
      stages.mark("dW_kv");
    }
    if (!kvdq) {
      Gemm g = per_head();
      g.trans_a = true;
      g.sm_target = dq_sms;
      gemm(ctx, 0, stream, g, dS, K, dQ32);
      stages.mark("dQ");
    }
  } else {
    // 3-5 run on two streams unless ATTNBWD_CUDA_GQA_OVERLAP=off: dV32 = Pᵀ·dO (side, after dO exists)
    // under dP and the softmax backward (main), then dK32 = dSᵀ·Q (side, after dS exists) under dQ = dS·K
    // (main). The same GEMMs and kernels either way (the same bits); the overlap fills the GPU on small S,
    // where each batched GEMM is a few CTAs per head and launch-bound (perf/NOTES.md). With padding every
    // GEMM has Sp = S8 rows (and keys) per head, and dV32 reads P's padded copy, which the softmax kernel
    // writes: dV32 then goes to the side stream with dK32, after dS.
    // Late dWo: dV32 (without padding) then dWo on the side stream after dA, dK32 on the main stream, and the
    // main stream waits for dV32 only (before the merge); with padding dV32 reads P's padded copy, so it is on
    // the main stream too and the side stream holds dWo alone.
    // A per-query-head batched GEMM as one GEMM per KV head over its group (ATTNBWD_CUDA_GQA_GROUP): a group's G
    // heads are consecutive in both operands, so K, the operands' head strides and the count change, not the layout.
    const auto over_groups = [&](Gemm& g) {
      g.K *= G, g.stride_a *= G, g.stride_b *= G, g.count = static_cast<int>(B * Hkv);
    };
    const cudaStream_t attn_side = overlap && !(late && pad) ? side : stream;
    const int attn_slot = attn_side == stream ? 0 : 1;
    const auto dv_gemm = [&] {  // 5a. dV32 = Pᵀ·dO (per query head, or per KV head over its group)
      Gemm g;
      g.trans_a = true;
      g.M = Sp, g.N = D, g.K = Sp, g.lda = Sp, g.ldb = ld_do, g.ldc = D, g.count = count, g.stride_a = Sp * Sp,
      g.stride_b = head_do, g.stride_c = Sp * D;
      if (v_summed) over_groups(g);
      gemm(ctx, attn_slot, attn_side, g, pad ? Pp : P, dOp, dV32);
      stages.mark("dV");
    };
    // O for the dP + softmax kernel (ATTNBWD_CUDA_GQA_PV=side), waited for here and not next to the kernel's launch: the
    // Context has one side mark, and the late-dWo form below takes it again (after dV32) before that launch.
    if (pv_on_side) stages.wait_side_mark(ctx);
    if (overlap || late) {
      stages.fork(ctx);  // side: after dO exists (and after grad_o_weight, queued there before unless late)
      forked = true;
    }
    if (!pad) dv_gemm();
    if (late) {
      stages.mark_side(ctx);  // the main stream waits for dV32 (if on the side) before the merge, not for dWo
      dwo_gemm();
    }
    // 3-4. dS.
    // The fused kernel reads dO as [B,H,S,D] (not the strided view); asked for, there is no padding.
    if (use_dpsm) {
      gqa_dp_softmax_launch(dq, stream);
    } else if (!fused_asked || dOp != dO || !fused_dp_softmax(dO, V, P, dS, BH, S, D, ld, scaling, stream)) {
      Gemm g;  // dP = dO·Vᵀ
      g.trans_b = true;
      g.M = Sp, g.N = Sp, g.K = D, g.lda = ld_do, g.ldb = D, g.ldc = ld, g.count = count, g.stride_a = head_do,
      g.stride_b = Sp * D, g.stride_c = Sp * ld;
      gemm(ctx, 0, stream, g, dOp, V, dS);
      if (pad) {  // ld = S8 = Sp
        softmax_rows16<true>(P, dS, Pp, BH, S, S8, scaling, row_kernel_rows, stream);
      } else if (S % 8 == 0 && aligned16(P)) {  // ld = S
        softmax_rows16<false>(P, dS, nullptr, BH, S, S, scaling, row_kernel_rows, stream);
      } else {
        const int threads = 256, rows_per_block = threads / 32;
        softmax_backward_rows_scalar<<<blocks_for(BH * S, rows_per_block), threads, 0, stream>>>(P, dS, BH * S, S, ld,
                                                                                                scaling);
        ATTNBWD_CUDA_CHECK_LAUNCH();
      }
    }
    stages.mark(use_dpsm ? "dP_softmax" : "dS");  // (the name shows which form ran: tests, STAGES=1)
    if (overlap && !late) stages.fork(ctx);  // side: after dS (and P's padded copy) exist
    // 5b. dK32 = dSᵀ·Q (side; main when late), dQ = dS·K (main).
    {
      Gemm g;
      g.M = Sp, g.N = D, g.K = Sp, g.lda = ld, g.ldb = D, g.ldc = D, g.count = count, g.stride_a = Sp * ld,
      g.stride_b = Sp * D, g.stride_c = Sp * D;
      g.trans_a = true;
      Gemm gk = g;  // dK32 per query head, or per KV head over its group
      if (k_summed) over_groups(gk);
      // DKDV=batch: [dK32 | dV32] = [dS | Pp]ᵀ·[Qp | dO], twice the count over the adjacent pairs (lda = ld = Sp,
      // stride (G·)Sp·Sp for dS and Pp; ldb = D, stride (G·)Sp·D for Qp and dO), and no dV32 GEMM of its own
      if (dkdv_batched) gk.count *= 2;
      if (dk_on_side) {  // (late, padded): on the side stream after dWo, once dS exists; dV32 and dQ beside it
        stages.fork(ctx);
        gemm(ctx, 1, side, gk, dS, Q, dK32);
        stages.mark_side(ctx);
      }
      if (pad && !dkdv_batched) dv_gemm();
      if (!dk_on_side) gemm(ctx, late ? 0 : attn_slot, late ? stream : attn_side, gk, dS, Q, dK32);
      if (dkdv_batched) stages.mark("dKV_batch");  // (the split shows which form ran)
      g.trans_a = false;
      gemm(ctx, 0, stream, g, dS, K, dQ32);
    }
    stages.mark("dQ_dK");
    if (late)
      stages.wait_side_mark(ctx);  // main: after dV32 (dWo keeps running on the side stream), or dK32 (and dWo) with DKSIDE
    else if (overlap)
      stages.join(ctx);  // main: after dV32 and dK32 exist
  }
  // 6-8. GQA sums, RoPE, merge (done already where the small kernels wrote the merged form).
  if (!sm.merged) {
    merge_launch(stream, kvw_early ? 1 : 0);  // (the k/v half ran right after the key-major kernel)
    stages.mark("gqa_rope_merge");
  }

  // 9. dX{q,k,v} = dXp·W (bf16 each; dXq straight into grad_hidden_states) and the weight gradients: the
  // path chosen at the start (gj, pj, all_sm90, gdx). Grouped: dX summed in the launch, nothing to add; grouped dX:
  // the same sum by a dX-only launch beside the separate path's cuBLASLt weight gradients.
  if (grouped) {
    sm90_launch(ctx, gj, stream, grouped_pdl_switch);  // after the merge pass or the small kernels
    stages.mark("qkv_grouped");
  } else if (thin) {
    void* ws = thin_plan.workspace_bytes ? ctx.scratch(1, thin_plan.workspace_bytes, stream) : nullptr;
    sm90::linear_thin_launch(gj.p, thin_plan, ws, stream, thin_pdl_switch);  // after the merge pass or the small kernels
    stages.mark("qkv_thin");
  } else if (all_sm90) {
    for (const auto& j : pj) sm90_launch(ctx, j, stream);
    stages.mark("qkv_proj");
  } else {
    stages.fork(ctx);
    forked = true;
    if (dw_batch) {  // one pointer-array batch: grad_q_weight's G row blocks, grad_k_weight, grad_v_weight
      ListedGemm l;
      l.g = dw_desc(KP);
      l.g.count = static_cast<int>(QP / KP + 2);
      for (int i = 0; i < l.g.count; ++i) {
        l.a[i] = dQKVp + i * KP, l.b[i] = a.hidden_states.data;
        l.c[i] = i < l.g.count - 2 ? static_cast<void*>(m(a.grad_q_weight.data) + i * KP * HS)
                                   : i == l.g.count - 2 ? a.grad_k_weight.data : a.grad_v_weight.data;
      }
      gemm_listed(ctx, 1, side, l, dw_ptrs);
      stages.mark("dW_qkv_batch");
    } else {
      dw_gemm(0, QP, a.grad_q_weight.data, 0);
      if (!kvw_early) {  // (else queued after the key-major kernel)
        dw_gemm(QP, KP, a.grad_k_weight.data, 0);
        dw_gemm(QP + KP, KP, a.grad_v_weight.data, 0);
      }
      stages.mark("dW_qkv");
    }
    if (grouped_dx) {
      sm90_launch(ctx, gdx, stream);
      stages.mark("dX_qkv_grouped");
    } else {
      Gemm g;
      g.M = T, g.N = HS, g.lda = QKV, g.ldb = HS, g.ldc = HS;
      g.K = QP;
      gemm(ctx, 0, stream, g, dQKVp, a.q_weight.data, a.grad_hidden_states.data);
      g.K = KP;
      if (dxsum_acc) {  // grad_hidden_states += dXk, then += dXv (cuBLASLt's C, beta = 1; in place)
        gemm(ctx, 0, stream, g, dQKVp + QP, a.k_weight.data, a.grad_hidden_states.data, 1.0f, 1.0f);
        gemm(ctx, 0, stream, g, dQKVp + QP + KP, a.v_weight.data, a.grad_hidden_states.data, 1.0f, 1.0f);
      } else {
        gemm(ctx, 0, stream, g, dQKVp + QP, a.k_weight.data, dXk);
        gemm(ctx, 0, stream, g, dQKVp + QP + KP, a.v_weight.data, dXv);
      }
      stages.mark(dxsum_acc ? "dX_qkv_acc" : "dX_qkv");
    }
  }
  // 10. grad_hidden_states = bf16(bf16(dXq + dXk) + dXv) (the grouped, thin and grouped-dX launches summed them
  // already, and DXSUM=acc's GEMMs added dXk and dXv into it).
  if (!grouped && !thin && !grouped_dx && !dxsum_acc) {
    bf* h = m(a.grad_hidden_states.data);
    const int threads = 256;
    const int64_t n = T * HS;  // HS % 8 == 0
    if (aligned16(h))
      add3<8><<<blocks_for(n / 8, threads), threads, 0, stream>>>(h, dXk, dXv, n / 8);
    else
      add3<1><<<blocks_for(n, threads), threads, 0, stream>>>(h, dXk, dXv, n);
    ATTNBWD_CUDA_CHECK_LAUNCH();
    stages.mark("add3");
  }
  if (forked) stages.join(ctx);
  stages.report("gqa_rope_backward B=" + std::to_string(B) + " S=" + std::to_string(S));
}

}  // namespace

void run(const GqaRopeShape& s, const GqaRopeArgs& a, const Options& o, cudaStream_t stream) {
  Context& ctx = Context::current();
  ctx.claim(stream, !o.deterministic);
  const auto key = [&] {
    return graph_key(2, a, {bits_of(a.scaling)});  // the ATTNBWD_* switches: enqueue adds them all
  };
  ctx.enqueue(key, stream, [&](cudaStream_t st) { enqueue_op(ctx, s, a, st); });
  ctx.release(stream);
}

}  // namespace attnbwd::cuda
