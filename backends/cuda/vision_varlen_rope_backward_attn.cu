// vision_varlen_rope_backward (spec §5), steps 3 and 6-7: block-diagonal attention per (sequence,
// head), forward recompute and backward, head_dim 128, on tensor cores (mma.sync m16n8k8 TF32, fp32
// accumulation; arch-neutral, valid on sm_90a and sm_100a).
//
// Flash-style, in three kernels over 64-token blocks of one sequence and one head (4 warps of 16
// rows each, operands staged in shared memory as fp32 and rounded to TF32 when a fragment is read):
//  - forward: per query block, loop over the key blocks with an online softmax; writes O (into AO),
//    lse = m + log l per row, and delta = Σ_d dO·O (dO = dY·Wp is computed before attention).
//  - dQ: per query block, loop over key blocks: P = exp(s·scaling − lse), dP = dO·vᵀ,
//    dS = P⊙(dP − delta)·scaling, dQ' += dS·k'; RoPE backward in the epilogue.
//  - dK/dV: per key block, loop over query blocks (transposed products): dV += Pᵀ·dO,
//    dK' += dSᵀ·q'; RoPE backward on dK' in the epilogue. No atomics: deterministic.
// delta = Σ_j P_ij dP_ij = dO_i·O_i is the reference's row term written another way.
//
// Products (Mode): TF32 (mma.sync m16n8k8); Strict's 3xTF32 (a·b ≈ a_hi·b_hi + a_hi·b_lo + a_lo·b_hi),
// fp32-accurate; and Default's fp16 (mma.sync m16n8k16, fp32 accumulation: half the instructions of
// TF32 per product; spec §5 measured fp16 GEMM operands to pass). In fp16, dS tiles are stored times
// kDsScale (a power of two, exact) so that small dS values stay normal fp16 numbers; dQ and dK are
// multiplied back by 1/kDsScale in their epilogues.
//
// Sequences come from the device cu_seqlens only: a one-CTA kernel writes a table of (sequence,
// block) per grid slot; slots past the last block exit at once. Rows and keys past a sequence's end
// are loaded as zeros, masked out of the softmax, and never written.
#include "vision_varlen_rope_backward_attn.cuh"

#include <cstdint>
#include <type_traits>

#include <cuda_fp16.h>

#include "check.hpp"
#include "mma_fp16.cuh"
#include "vision_varlen_rope_backward_attn_parts.cuh"

namespace attnbwd::cuda::varlen {
namespace {

// Shared-memory row strides (floats). Operands read as [row = lane/4][col = lane%4] fragments (A, or B
// given as [n][k]) use ≡ 4 (mod 32): conflict-free. B given as [k][n] prefers ≡ 8 (mod 32).
constexpr int kLdA = kD + 4;      // 132
constexpr int kLdB = kD + 8;      // 136
constexpr int kLdP = kRows + 4;   // 68: P and dS tiles

__device__ __forceinline__ uint32_t tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ void mma1688(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

constexpr int kTf32 = 0, kTf32x3 = 1, kFp16 = 2;  // product modes

// fp16 products (m16n8k16), operands converted from the fp32 tiles as fragments are read. A pairs
// (k, k+1) are adjacent in a row (8-byte loads: lda even, k even); B pairs too when BT.
template <int NT, int K, bool BT>
__device__ __forceinline__ void warp_mma_fp16(float (&acc)[NT][4], const float* __restrict__ A, int lda,
                                              const float* __restrict__ B, int ldb) {
  static_assert(K % 16 == 0, "K must be a multiple of 16");
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 16) {
    const float2 x0 = *reinterpret_cast<const float2*>(A + g * lda + k0 + 2 * t);
    const float2 x1 = *reinterpret_cast<const float2*>(A + (g + 8) * lda + k0 + 2 * t);
    const float2 x2 = *reinterpret_cast<const float2*>(A + g * lda + k0 + 2 * t + 8);
    const float2 x3 = *reinterpret_cast<const float2*>(A + (g + 8) * lda + k0 + 2 * t + 8);
    const uint32_t a0 = half2_bits(x0.x, x0.y), a1 = half2_bits(x1.x, x1.y), a2 = half2_bits(x2.x, x2.y),
                   a3 = half2_bits(x3.x, x3.y);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int n = j * 8 + g;
      uint32_t b0, b1;
      if constexpr (BT) {
        const float2 y0 = *reinterpret_cast<const float2*>(B + n * ldb + k0 + 2 * t);
        const float2 y1 = *reinterpret_cast<const float2*>(B + n * ldb + k0 + 2 * t + 8);
        b0 = half2_bits(y0.x, y0.y), b1 = half2_bits(y1.x, y1.y);
      } else {
        b0 = half2_bits(B[(k0 + 2 * t) * ldb + n], B[(k0 + 2 * t + 1) * ldb + n]);
        b1 = half2_bits(B[(k0 + 2 * t + 8) * ldb + n], B[(k0 + 2 * t + 9) * ldb + n]);
      }
      mma16816(acc[j], a0, a1, a2, a3, b0, b1);
    }
  }
}

template <bool Split, int NT, int K, bool BT>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[NT][4], const float* __restrict__ A, int lda,
                                              const float* __restrict__ B, int ldb);

// acc[j] (16×8 tile j of this warp's 16×(8·NT) result) += A·B over K, A: 16 rows of `A` (row stride
// lda); B(k, n) = B[n·ldb + k] when BT (B stored [n][k]), else B[k·ldb + n].
// Mode: kTf32, kTf32x3 or kFp16.
template <int Mode, int NT, int K, bool BT>
__device__ __forceinline__ void warp_mma(float (&acc)[NT][4], const float* __restrict__ A, int lda,
                                         const float* __restrict__ B, int ldb) {
  if constexpr (Mode == kFp16) {
    warp_mma_fp16<NT, K, BT>(acc, A, lda, B, ldb);
  } else {
    warp_mma_tf32<Mode == kTf32x3, NT, K, BT>(acc, A, lda, B, ldb);
  }
}

// TF32 products (m16n8k8); Split: 3xTF32.
template <bool Split, int NT, int K, bool BT>
__device__ __forceinline__ void warp_mma_tf32(float (&acc)[NT][4], const float* __restrict__ A, int lda,
                                              const float* __restrict__ B, int ldb) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll 2
  for (int k0 = 0; k0 < K; k0 += 8) {
    const float af[4] = {A[g * lda + k0 + t], A[(g + 8) * lda + k0 + t], A[g * lda + k0 + t + 4],
                         A[(g + 8) * lda + k0 + t + 4]};
    uint32_t ah[4], al[4];
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
      const uint32_t bh0 = tf32(b0), bh1 = tf32(b1);
      if constexpr (Split) {
        const uint32_t bl0 = tf32(b0 - __uint_as_float(bh0)), bl1 = tf32(b1 - __uint_as_float(bh1));
        mma1688(acc[j], al[0], al[1], al[2], al[3], bh0, bh1);
        mma1688(acc[j], ah[0], ah[1], ah[2], ah[3], bl0, bl1);
      }
      mma1688(acc[j], ah[0], ah[1], ah[2], ah[3], bh0, bh1);
    }
  }
}

// 64 rows × 128 floats from global (row stride ldg, rows [row0, row0 + rows)) into shared (stride
// lds); rows ≥ rows are zero. Global rows are 16-byte aligned (the fast path's own buffers).
__device__ __forceinline__ void load_tile(float* __restrict__ s, int lds, const float* __restrict__ g, int64_t ldg,
                                          int64_t row0, int rows) {
  for (int i = threadIdx.x; i < kRows * (kD / 4); i += kThreads) {
    const int r = i / (kD / 4), c4 = (i % (kD / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < rows) v = *reinterpret_cast<const float4*>(g + (row0 + r) * ldg + c4);
    *reinterpret_cast<float4*>(s + r * lds + c4) = v;
  }
}

// This warp's 16×64 accumulator into its rows of a [64][kLdP] tile.
__device__ __forceinline__ void store_tile16x64(float* __restrict__ s, const float (&acc)[8][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    *reinterpret_cast<float2*>(s + g * kLdP + j * 8 + 2 * t) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(s + (g + 8) * kLdP + j * 8 + 2 * t) = make_float2(acc[j][2], acc[j][3]);
  }
}

// The fp32-tile kernels' key step: key block k0 (keys rows) of the head's K and V into sK, sV (V's row
// stride ldv), synchronously between barriers (every warp is done with the previous block before, and
// sees the new one after).
__device__ __forceinline__ void load_kv(const Block& b, float* sK, float* sV, int ldv, int64_t k0, int keys) {
  __syncthreads();
  load_tile(sK, kLdA, b.gK, b.ld3, k0, keys);
  load_tile(sV, ldv, b.gV, b.ld3, k0, keys);
  __syncthreads();
}


// ---------------------------------------------------------------------------------------------
template <int Mode>
__global__ void __launch_bounds__(kThreads, 1) attn_forward(const AttnParams p) {
  Block b;
  if (!block_of(p, b)) return;
  const auto [start, end, q0, rows, h, ld3, gQ, gK, gV] = b;
  extern __shared__ float4 smem4[];
  float* sQ = reinterpret_cast<float*>(smem4);
  float* sK = sQ + kRows * kLdA;
  float* sV = sK + kRows * kLdA;
  float* sP = sV + kRows * kLdB;
  const int w = threadIdx.x / 32;
  float* wP = sP + w * 16 * kLdP;

  load_tile(sQ, kLdA, gQ, ld3, q0, rows);
  float o[16][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (l: this thread's part)
  for (int64_t k0 = start; k0 < end; k0 += kRows) {
    const int keys = static_cast<int>(end - k0 < kRows ? end - k0 : kRows);
    load_kv(b, sK, sV, kLdB, k0, keys);
    float s[8][4];
    zero(s);
    warp_mma<Mode, 8, kD, true>(s, sQ + w * 16 * kLdA, kLdA, sK, kLdA);
    softmax_step(s, keys, p.scaling, m, l, o);
    __syncwarp();  // the previous block's P is no longer read
    store_tile16x64(wP, s);
    __syncwarp();
    warp_mma<Mode, 16, kRows, false>(o, wP, kLdP, sV, kLdB);
  }
  forward_epilogue(p, o, m, l, q0, rows, h, p.dAO + static_cast<int64_t>(h) * kD,
                   p.AO + static_cast<int64_t>(h) * kD);
}

// ---------------------------------------------------------------------------------------------
template <int Mode>
__global__ void __launch_bounds__(kThreads, 1) attn_dq(const AttnParams p) {
  Block b;
  if (!block_of(p, b)) return;
  const auto [start, end, q0, rows, h, ld3, gQ, gK, gV] = b;
  extern __shared__ float4 smem4[];
  float* sQ = reinterpret_cast<float*>(smem4);
  float* sdO = sQ + kRows * kLdA;
  float* sK = sdO + kRows * kLdA;
  float* sV = sK + kRows * kLdA;
  float* sS = sV + kRows * kLdA;
  const int w = threadIdx.x / 32;
  float* wS = sS + w * 16 * kLdP;

  load_tile(sQ, kLdA, gQ, ld3, q0, rows);
  load_tile(sdO, kLdA, p.dAO + static_cast<int64_t>(h) * kD, p.C, q0, rows);
  float lse[2], dl[2];
  load_row_terms(p, q0, rows, h, lse, dl);
  float dq[16][4];
  zero(dq);
  for (int64_t k0 = start; k0 < end; k0 += kRows) {
    const int keys = static_cast<int>(end - k0 < kRows ? end - k0 : kRows);
    load_kv(b, sK, sV, kLdA, k0, keys);
    float s[8][4], dp[8][4];
    zero(s);
    zero(dp);
    warp_mma<Mode, 8, kD, true>(s, sQ + w * 16 * kLdA, kLdA, sK, kLdA);
    warp_mma<Mode, 8, kD, true>(dp, sdO + w * 16 * kLdA, kLdA, sV, kLdA);
    ds_rows(s, dp, keys, rows, lse, dl, p.scaling, Mode == kFp16 ? p.scaling * kDsScale : p.scaling);
    __syncwarp();
    store_tile16x64(wS, s);
    __syncwarp();
    warp_mma<Mode, 16, kRows, false>(dq, wS, kLdP, sK, kLdA);
  }
  if constexpr (Mode == kFp16) scale_acc(dq, 1.0f / kDsScale);
  store_dq<false>(p, dq, q0, rows, h, ld3, nullptr);
}

// ---------------------------------------------------------------------------------------------
template <int Mode>
__global__ void __launch_bounds__(kThreads, 1) attn_dkv(const AttnParams p) {
  Block b;
  if (!block_of(p, b)) return;
  const auto [start, end, k0, keys, h, ld3, gQ, gK, gV] = b;
  extern __shared__ float4 smem4[];
  float* sK = reinterpret_cast<float*>(smem4);
  float* sV = sK + kRows * kLdA;
  float* sQ = sV + kRows * kLdA;
  float* sdO = sQ + kRows * kLdA;
  float* sP = sdO + kRows * kLdA;
  float* sS = sP + kRows * kLdP;
  float* sLse = sS + kRows * kLdP;
  float* sDl = sLse + kRows;
  const float* gdO = p.dAO + static_cast<int64_t>(h) * kD;
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float* wP = sP + w * 16 * kLdP;
  float* wS = sS + w * 16 * kLdP;

  load_tile(sK, kLdA, gK, ld3, k0, keys);
  load_tile(sV, kLdA, gV, ld3, k0, keys);
  float dk[16][4], dv[16][4];
  zero(dk);
  zero(dv);
  for (int64_t q0 = start; q0 < end; q0 += kRows) {
    const int qrows = static_cast<int>(end - q0 < kRows ? end - q0 : kRows);
    __syncthreads();
    load_tile(sQ, kLdA, gQ, ld3, q0, qrows);
    load_tile(sdO, kLdA, gdO, p.C, q0, qrows);
    stage_row_terms(p, q0, qrows, h, sLse, sDl);
    __syncthreads();
    // Transposed tiles: rows are this warp's 16 keys, columns the 64 queries.
    float s[8][4];
    zero(s);
    warp_mma<Mode, 8, kD, true>(s, sK + w * 16 * kLdA, kLdA, sQ, kLdA);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int col = j * 8 + 2 * t + (r & 1);
        const bool live = col < qrows && w * 16 + g + 8 * (r >> 1) < keys;
        s[j][r] = live ? expf(s[j][r] * p.scaling - sLse[col]) : 0.0f;
      }
    __syncwarp();  // the previous block's Pᵀ and dSᵀ are no longer read
    store_tile16x64(wP, s);
    float dp[8][4];
    zero(dp);
    warp_mma<Mode, 8, kD, true>(dp, sV + w * 16 * kLdA, kLdA, sdO, kLdA);
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int col = j * 8 + 2 * t + (r & 1);
        const float pr = wP[(g + 8 * (r >> 1)) * kLdP + col];  // this thread's own Pᵀ element
        dp[j][r] = pr * (dp[j][r] - sDl[col]) * (Mode == kFp16 ? p.scaling * kDsScale : p.scaling);
      }
    store_tile16x64(wS, dp);
    __syncwarp();
    warp_mma<Mode, 16, kRows, false>(dv, wP, kLdP, sdO, kLdA);
    warp_mma<Mode, 16, kRows, false>(dk, wS, kLdP, sQ, kLdA);
  }
  if constexpr (Mode == kFp16) scale_acc(dk, 1.0f / kDsScale);
  store_dkdv<false>(p, dk, dv, k0, keys, h, ld3, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Default's fp16 kernels (Products::Fp16). Same blocks, loops and arithmetic as the Mode kernels
// above, but they read fp16 inputs (p.qkvh, p.dAOh: written so by bias + RoPE and by the dAO GEMM),
// copy them with cp.async into fp16 shared-memory tiles whose streamed operand (K/V, or Q/dO in dK/dV)
// is double-buffered so the next block's copy runs under this block's math, read fragments with
// ldmatrix, and never stage P or dS in shared memory: a 16×64 fp32 accumulator of m16n8 tiles is,
// element for element, the A operand of the next m16n8k16 product (pairs of adjacent columns), so it
// is packed in registers. 87-105 KB of shared memory: 2 CTAs per SM. The forward writes AO in fp16
// (p.AOh, the dWp GEMM's operand) and forms delta from the fp16 dO the products use.
constexpr int kLdH = kD + 8;  // fp16 row stride: 272 B, so 8 ldmatrix rows hit 8 distinct 16-byte bank groups

// Issues the copy of rows [row0, row0 + rows) × 128 halves of a row-major fp16 matrix (row stride ldg
// halves, 16-byte aligned rows) into an fp16 tile (stride kLdH); rows ≥ rows are zero-filled.
// rows ≥ 1. The caller commits and waits.
__device__ __forceinline__ void issue_tile_h(__half* s, const __half* __restrict__ g, int64_t ldg, int64_t row0,
                                             int rows) {
  mma16::issue_tile<kRows, kD, kLdH, kThreads>(s, g, ldg, row0, rows);
}

// acc[j] += A·Bᵀ over k = 0..127: A = 16 rows of an fp16 tile, B = rows [n][k] of one (n = 8·NT).
template <int NT>
__device__ __forceinline__ void mma_abt_h(float (&acc)[NT][4], const __half* A, const __half* B) {
  mma16::mma_abt<NT, kD, kLdH>(acc, A, B);
}

// acc[j] += A·B over k = 0..63: A from to_afrag, B = rows [k][n] of an fp16 tile (n = 0..127).
__device__ __forceinline__ void mma_rb_h(float (&acc)[16][4], const uint32_t (&a)[4][4], const __half* B) {
  mma16::mma_rb<16, kLdH>(acc, a, B);
}

constexpr int kTileH = kRows * kLdH;  // halves per fp16 tile (17408 B)

// The K and V tiles of key block k1 (keys1 keys) into buffer `to` of the double-buffered sK, sV.
__device__ __forceinline__ void issue_kv_h(__half* sK, __half* sV, const HalfCols& hc, int64_t ld3, int64_t k1,
                                           int keys1, int to) {
  issue_tile_h(sK + to * kTileH, hc.k, ld3, k1, keys1);
  issue_tile_h(sV + to * kTileH, hc.v, ld3, k1, keys1);
}

// Forward: Q staged once, K and V double-buffered (the next block's copy runs under this block's math).
__global__ void __launch_bounds__(kThreads, 2) attn_forward_h(const AttnParams p) {
  Block b;
  if (!block_of(p, b)) return;
  const int64_t q0 = b.b0, ld3 = b.ld3;  // (plain copies: lambdas may not capture structured bindings
  const int rows = b.n, h = b.h;          // before C++20)
  const HalfCols hc = half_cols(p, h);
  extern __shared__ float4 smem4[];
  __half* sQ = reinterpret_cast<__half*>(smem4);
  __half* sK = sQ + kTileH;      // [2] tiles
  __half* sV = sK + 2 * kTileH;  // [2] tiles
  const int w = threadIdx.x / 32;

  issue_tile_h(sQ, hc.q, ld3, q0, rows);  // committed with the first key block
  float o[16][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (l: this thread's part)
  stream_blocks<kRows>(
      b.start, b.end,
      [&](int64_t k1, int keys1, int to) { issue_kv_h(sK, sV, hc, ld3, k1, keys1, to); },
      [&](int buf, int keys) {
        float s[8][4];
        zero(s);
        mma_abt_h<8>(s, sQ + w * 16 * kLdH, sK + buf * kTileH);
        softmax_step<true>(s, keys, p.scaling, m, l, o);
        uint32_t a[4][4];
        to_afrag(a, s);
        mma_rb_h(o, a, sV + buf * kTileH);
      });
  forward_epilogue(p, o, m, l, q0, rows, h, hc.dO, p.AOh + static_cast<int64_t>(h) * kD);
}

// dQ: Q and dO staged once, K and V double-buffered.
// HalfOut: dQ in fp16 and column sums (ATTNBWD_CUDA_VARLEN_DQKV=fp16, see AttnParams::dqkvh).
template <bool HalfOut>
__device__ __forceinline__ void dq_h(const AttnParams& p) {
  Block b;
  if (!block_of(p, b)) {
    if constexpr (HalfOut) zero_part(p, 0);
    return;
  }
  const int64_t q0 = b.b0, ld3 = b.ld3;
  const int rows = b.n, h = b.h;
  const HalfCols hc = half_cols(p, h);
  extern __shared__ float4 smem4[];
  __half* sQ = reinterpret_cast<__half*>(smem4);
  __half* sdO = sQ + kTileH;
  __half* sK = sdO + kTileH;     // [2] tiles
  __half* sV = sK + 2 * kTileH;  // [2] tiles
  const int w = threadIdx.x / 32;

  issue_tile_h(sQ, hc.q, ld3, q0, rows);  // committed with the first key block
  issue_tile_h(sdO, hc.dO, p.C, q0, rows);
  float lse[2], dl[2];
  load_row_terms(p, q0, rows, h, lse, dl);
  float dq[16][4];
  zero(dq);
  stream_blocks<kRows>(
      b.start, b.end,
      [&](int64_t k1, int keys1, int to) { issue_kv_h(sK, sV, hc, ld3, k1, keys1, to); },
      [&](int buf, int keys) {
        const __half* cK = sK + buf * kTileH;
        float s[8][4], dp[8][4];
        zero(s);
        zero(dp);
        mma_abt_h<8>(s, sQ + w * 16 * kLdH, cK);
        mma_abt_h<8>(dp, sdO + w * 16 * kLdH, sV + buf * kTileH);
        ds_rows<true>(s, dp, keys, rows, lse, dl, p.scaling, p.scaling * kDsScale);
        uint32_t a[4][4];
        to_afrag(a, s);
        mma_rb_h(dq, a, cK);
      });
  scale_acc(dq, 1.0f / kDsScale);
  store_dq<HalfOut>(p, dq, q0, rows, h, ld3, reinterpret_cast<float*>(smem4));  // the tiles are free: stream_blocks ended
}

// dK/dV: K and V staged once; Q, dO, lse and delta of the query blocks double-buffered.
template <bool HalfOut>
__device__ __forceinline__ void dkv_h(const AttnParams& p) {
  Block b;
  if (!block_of(p, b)) {
    if constexpr (HalfOut) zero_part(p, 1), zero_part(p, 2);
    return;
  }
  const int64_t k0 = b.b0, ld3 = b.ld3;
  const int keys = b.n, h = b.h;
  const HalfCols hc = half_cols(p, h);
  extern __shared__ float4 smem4[];
  __half* sK = reinterpret_cast<__half*>(smem4);
  __half* sV = sK + kTileH;
  __half* sQ = sV + kTileH;       // [2] tiles
  __half* sdO = sQ + 2 * kTileH;  // [2] tiles
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kTileH);  // [2][kRows]
  float* sDl = sLse + 2 * kRows;                             // [2][kRows]
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

  issue_tile_h(sK, hc.k, ld3, k0, keys);  // committed with the first query block
  issue_tile_h(sV, hc.v, ld3, k0, keys);
  float dk[16][4], dv[16][4];
  zero(dk);
  zero(dv);
  stream_blocks<kRows>(
      b.start, b.end,
      [&](int64_t q1, int qrows1, int to) {
        issue_tile_h(sQ + to * kTileH, hc.q, ld3, q1, qrows1);
        issue_tile_h(sdO + to * kTileH, hc.dO, p.C, q1, qrows1);
        stage_row_terms(p, q1, qrows1, h, sLse + to * kRows, sDl + to * kRows);
      },
      [&](int buf, int qrows) {
        const __half* cQ = sQ + buf * kTileH;
        const __half* cdO = sdO + buf * kTileH;
        const float* cLse = sLse + buf * kRows;
        const float* cDl = sDl + buf * kRows;
        // Transposed tiles: rows are this warp's 16 keys, columns the 64 queries.
        const float sl = p.scaling * kLog2e;  // P = 2^(s·scaling·log2 e − lse·log2 e) (exp2_approx)
        float s[8][4], dp[8][4];
        zero(s);
        zero(dp);
        mma_abt_h<8>(s, sK + w * 16 * kLdH, cQ);
        mma_abt_h<8>(dp, sV + w * 16 * kLdH, cdO);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int col = j * 8 + 2 * t + (r & 1);
            const bool live = col < qrows && w * 16 + g + 8 * (r >> 1) < keys;
            s[j][r] = live ? exp2_approx(fmaf(s[j][r], sl, -cLse[col] * kLog2e)) : 0.0f;
            dp[j][r] = s[j][r] * (dp[j][r] - cDl[col]) * (p.scaling * kDsScale);
          }
        uint32_t a[4][4];
        to_afrag(a, s);
        mma_rb_h(dv, a, cdO);
        to_afrag(a, dp);
        mma_rb_h(dk, a, cQ);
      });
  scale_acc(dk, 1.0f / kDsScale);
  store_dkdv<HalfOut>(p, dk, dv, k0, keys, h, ld3, reinterpret_cast<float*>(smem4));  // the tiles are free
}

template <bool HalfOut>
__global__ void __launch_bounds__(kThreads, 2) attn_dq_h(const AttnParams p) {
  dq_h<HalfOut>(p);
}
template <bool HalfOut>
__global__ void __launch_bounds__(kThreads, 2) attn_dkv_h(const AttnParams p) {
  dkv_h<HalfOut>(p);
}
// Both in one launch (ATTNBWD_CUDA_VARLEN_BWD=one): blockIdx.z 0 the dQ CTAs, 1 the dK/dV CTAs. They read the same
// inputs and write disjoint outputs (dQ | dK, dV columns and partial rows), so the bits are the two launches'; the
// dK/dV CTAs start as soon as SMs are free instead of after the last dQ CTA.
template <bool HalfOut>
__global__ void __launch_bounds__(kThreads, 2) attn_bwd_h(const AttnParams p) {
  if (blockIdx.z == 0) {
    dq_h<HalfOut>(p);
  } else {
    dkv_h<HalfOut>(p);
  }
}

constexpr std::size_t kSmemForwardH = sizeof(__half) * 5 * kTileH;
constexpr std::size_t kSmemDqH = sizeof(__half) * 6 * kTileH;
constexpr std::size_t kSmemDkvH = sizeof(__half) * 6 * kTileH + sizeof(float) * 4 * kRows;

constexpr std::size_t kSmemForward = sizeof(float) * (2 * kRows * kLdA + kRows * kLdB + kRows * kLdP);
constexpr std::size_t kSmemDq = sizeof(float) * (4 * kRows * kLdA + kRows * kLdP);
constexpr std::size_t kSmemDkv = sizeof(float) * (4 * kRows * kLdA + 2 * kRows * kLdP + 2 * kRows);

// ---------------------------------------------------------------------------------------------
// One CTA: each thread takes a contiguous run of sequences, a block-wide scan gives its first slot.
constexpr int kTableThreads = 1024;

__global__ void __launch_bounds__(kTableThreads) block_table_kernel(const std::int32_t* cu, int64_t n, int64_t S,
                                                                    int2* table, int64_t slots) {
  __shared__ int64_t scan[kTableThreads];
  const int tid = threadIdx.x;
  const int64_t per = (n + kTableThreads - 1) / kTableThreads;
  const int64_t i0 = tid * per < n ? tid * per : n;
  const int64_t i1 = i0 + per < n ? i0 + per : n;
  int64_t count = 0;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t a, b;
    seq_range(cu, i, S, a, b);
    count += (b - a + kBlock - 1) / kBlock;
  }
  scan[tid] = count;
  __syncthreads();
  for (int off = 1; off < kTableThreads; off *= 2) {  // inclusive Hillis-Steele scan
    const int64_t v = tid >= off ? scan[tid - off] : 0;
    __syncthreads();
    scan[tid] += v;
    __syncthreads();
  }
  int64_t at = scan[tid] - count;
  for (int64_t i = i0; i < i1; ++i) {
    int64_t a, b;
    seq_range(cu, i, S, a, b);
    const int64_t nb = (b - a + kBlock - 1) / kBlock;
    for (int64_t k = 0; k < nb && at < slots; ++k, ++at) table[at] = make_int2(static_cast<int>(i), static_cast<int>(k));
  }
  const int64_t total = scan[kTableThreads - 1];
  for (int64_t s = total + tid; s < slots; s += kTableThreads) table[s] = make_int2(-1, -1);
}

// f(std::integral_constant<int, Mode>) for the kernels' product mode of `products`.
template <class F>
void with_mode(Products products, F&& f) {
  switch (products) {
    case Products::Tf32x3: f(std::integral_constant<int, kTf32x3>{}); break;
    case Products::Fp16Smem32: f(std::integral_constant<int, kFp16>{}); break;
    default: f(std::integral_constant<int, kTf32>{}); break;
  }
}

}  // namespace

void build_block_table(const std::int32_t* cu, std::int64_t n, std::int64_t S, int2* table, std::int64_t slots,
                       cudaStream_t stream) {
  block_table_kernel<<<1, kTableThreads, 0, stream>>>(cu, n, S, table, slots);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

void attention_forward(const AttnParams& p, Products products, cudaStream_t stream, bool sm90) {
  if (products == Products::Fp16 && sm90) return attention_forward_sm90(p, stream);
  if (products == Products::Fp16) return launch(attn_forward_h, kSmemForwardH, p, stream);
  with_mode(products, [&](auto mode) { launch(attn_forward<decltype(mode)::value>, kSmemForward, p, stream); });
}

void attention_backward(const AttnParams& p, Products products, cudaStream_t stream, bool one_launch, int sm90) {
  if (products != Products::Fp16 && (p.dqkvh != nullptr || p.part != nullptr))
    throw Error("varlen attention_backward", "fp16 dQKV and column sums need the fp16-tile kernels");
  if (products == Products::Fp16) {
    if (p.dqkvh != nullptr && p.part == nullptr)
      throw Error("varlen attention_backward", "fp16 dQKV needs the column-sum rows (part)");
    if (one_launch && sm90 == 0) {
      constexpr std::size_t smem = kSmemDqH > kSmemDkvH ? kSmemDqH : kSmemDkvH;
      if (p.dqkvh != nullptr) return launch(attn_bwd_h<true>, smem, p, stream, 2);
      return launch(attn_bwd_h<false>, smem, p, stream, 2);
    }
    if (one_launch && sm90 == (kSm90Dq | kSm90Dkv)) return attention_backward_one_sm90(p, stream);
    // Two launches, dQ then dK/dV, each on mma.sync or (its sm90 bit) on sm_90a wgmma.
    if (sm90 & kSm90Dq)
      attention_backward_dq_sm90(p, stream);
    else if (p.dqkvh != nullptr)
      launch(attn_dq_h<true>, kSmemDqH, p, stream);
    else
      launch(attn_dq_h<false>, kSmemDqH, p, stream);
    if (sm90 & kSm90Dkv) return attention_backward_dkv_sm90(p, stream);
    if (p.dqkvh != nullptr) return launch(attn_dkv_h<true>, kSmemDkvH, p, stream);
    return launch(attn_dkv_h<false>, kSmemDkvH, p, stream);
  }
  with_mode(products, [&](auto mode) {
    launch(attn_dq<decltype(mode)::value>, kSmemDq, p, stream);
    launch(attn_dkv<decltype(mode)::value>, kSmemDkv, p, stream);
  });
}

}  // namespace attnbwd::cuda::varlen
