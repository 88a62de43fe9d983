// vision_varlen_rope_backward: the device helpers the attention kernels of both kernel files share
// (vision_varlen_rope_backward_attn.cu: the mma.sync kernels; vision_varlen_rope_backward_attn_sm90.cu: the sm_90a
// wgmma forward, dQ and dK/dV kernels): a CTA's block from the device block table, the fp16 kernels' exponential,
// the row terms (lse, delta) of a query block, the element steps that turn scores into P and dS, the forward, dQ
// and dK/dV epilogues (RoPE backward, fp16 or fp32 dQKV, bias column sums), and the host launch over (slots,
// heads). Each including file gets its own copies (anonymous namespace).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "check.hpp"
#include "mma_fp16.cuh"
#include "vision_varlen_rope_backward_attn.cuh"

namespace attnbwd::cuda::varlen {
namespace {

using std::int64_t;
using std::uint32_t;
using mma16::cp_async16;
using mma16::cp_async_commit;
using mma16::cp_async_wait;
using mma16::stream_blocks;
using mma16::half2_bits;
using mma16::mma16816;
using mma16::scale_acc;
using mma16::to_afrag;
using mma16::zero;

constexpr int kD = kHeadDim;
constexpr int kRows = kBlock;     // rows per block (16 per warp)
constexpr int kThreads = 128;

__device__ __forceinline__ void seq_range(const std::int32_t* cu, int64_t i, int64_t S, int64_t& a, int64_t& b) {
  const int64_t x = cu[i], y = cu[i + 1];
  a = x < 0 ? 0 : (x > S ? S : x);
  b = y < a ? a : (y > S ? S : y);
}

constexpr float kDsScale = 256.0f;                // fp16 mode: dS tiles stored ×kDsScale

// The slot's (sequence, block) and the sequence's token range; false when the slot is unused.
__device__ __forceinline__ bool slot_of(const AttnParams& p, int64_t& start, int64_t& end, int64_t& b0) {
  const int2 e = p.table[blockIdx.x];
  if (e.x < 0) return false;
  seq_range(p.cu, e.x, p.S, start, end);
  b0 = start + static_cast<int64_t>(e.y) * kBlock;
  return b0 < end;
}

// This CTA's block: the slot's sequence [start, end), the block's first token b0 and token count n
// (≤ 64), the head h, and the head's q, k, v columns of qkv (row stride ld3).
struct Block {
  int64_t start, end, b0;
  int n, h;
  int64_t ld3;
  const float *gQ, *gK, *gV;
};

__device__ __forceinline__ bool block_of(const AttnParams& p, Block& b) {
  if (!slot_of(p, b.start, b.end, b.b0)) return false;
  b.n = static_cast<int>(b.end - b.b0 < kRows ? b.end - b.b0 : kRows);
  b.h = blockIdx.y;
  b.ld3 = 3 * p.C;
  b.gQ = p.qkv + static_cast<int64_t>(b.h) * kD;
  b.gK = b.gQ + p.C;
  b.gV = b.gQ + 2 * p.C;
  return true;
}

// RoPE backward of a gradient pair (lo at column d, hi at d + 64) of one token row:
// lo' = lo·cos[d] + hi·sin[d+64]; hi' = hi·cos[d+64] − lo·sin[d].
// The cos/sin values one thread's RoPE backward of one row needs (columns j·8 + 2t + e and + 64, e = 0, 1),
// loaded together before any result is stored: loads after a store to a possibly aliasing pointer could
// not be moved above it, and each of the 8 column groups paid a global round trip (ncu, 2026-12-01: the
// dQ kernel's epilogue was 37 % of its stall samples). Scalar loads: cos/sin may be only 4-byte aligned.
struct RopeRow {
  float c_lo[8][2], c_hi[8][2], s_lo[8][2], s_hi[8][2];
};
__device__ __forceinline__ void load_rope_row(const float* __restrict__ cs, const float* __restrict__ sn, int t,
                                              RopeRow& r) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = j * 8 + 2 * t + e;
      r.c_lo[j][e] = __ldg(cs + d);
      r.c_hi[j][e] = __ldg(cs + d + kD / 2);
      r.s_lo[j][e] = __ldg(sn + d);
      r.s_hi[j][e] = __ldg(sn + d + kD / 2);
    }
}
// lo', hi' for column d = j·8 + 2t + e of the row loaded into r.
__device__ __forceinline__ void rope_back(const RopeRow& r, int j, int e, float lo, float hi, float& olo, float& ohi) {
  olo = lo * r.c_lo[j][e] + hi * r.s_hi[j][e];
  ohi = hi * r.c_hi[j][e] - lo * r.s_lo[j][e];
}

// Staged epilogue inputs (the wgmma kernels): after the main loop the tiles are free, so a block's 64 rows of cos
// and sin (dQ, dK/dV) or of dO (forward) are copied into them by cp.async in one batch — every copy in flight at
// once, one wait — instead of each thread's scalar loads, one row after the other, between the stores (ncu at
// S = 8192, sixteenth session: the epilogues were ~45 % of the backward kernel's stall samples, mostly long-
// scoreboard waits on those loads). Rows past the block are zero-filled. Rows are padded so that a half-warp's
// reads (rows g = 0..3 of its row group, 8 consecutive words per row: float2 at 2t) take distinct banks: cos/sin
// rows kRopeLd = 136 floats apart (8 banks per row; 132 would give 2-way conflicts), dO rows kDoLd = 136 halves
// apart (half2 at 2t: 4 words per row, 4 banks per row). The staging area starts kStageOffset bytes into the tiles;
// the column sums' reduction space `red` (mma16::cta_column_sums: 4·8·16 floats) is in front of it.
constexpr int kRopeLd = kD + 8;
constexpr int kDoLd = kD + 8;
constexpr int kStageOffset = 4096;
static_assert(4 * 8 * 16 * static_cast<int>(sizeof(float)) <= kStageOffset, "red lies in front of the staged rows");
static_assert(2 * kRows * kRopeLd * 4 + kStageOffset <= 6 * kRows * kD * 2, "staged cos/sin fit the free tiles");

// Issues and commits (does not wait for) the copies of cos and sin rows [r0, r0 + rows) into sc (cos) and
// sc + kRows·kRopeLd (sin). 16-byte copies where both tensors are 16-byte aligned, else 4-byte ones.
__device__ __forceinline__ void issue_rope_rows(const AttnParams& p, int64_t r0, int rows, float* sc) {
  if (((reinterpret_cast<std::uintptr_t>(p.cos) | reinterpret_cast<std::uintptr_t>(p.sin)) & 15) == 0) {
    constexpr int kChunks = kD / 4;  // per row
#pragma unroll 4
    for (int i = threadIdx.x; i < 2 * kRows * kChunks; i += kThreads) {
      const int arr = i / (kRows * kChunks), r = (i / kChunks) % kRows, c = i % kChunks;
      const float* src = (arr != 0 ? p.sin : p.cos) + (r0 + (r < rows ? r : 0)) * kD + c * 4;
      cp_async16(sc + (arr * kRows + r) * kRopeLd + c * 4, src, r < rows);
    }
  } else {
#pragma unroll 4
    for (int i = threadIdx.x; i < 2 * kRows * kD; i += kThreads) {
      const int arr = i / (kRows * kD), r = (i / kD) % kRows, c = i % kD;
      const float* src = (arr != 0 ? p.sin : p.cos) + (r0 + (r < rows ? r : 0)) * kD + c;
      mma16::cp_async4(sc + (arr * kRows + r) * kRopeLd + c, src, r < rows);
    }
  }
  cp_async_commit();
}
// The staged row `row`'s values for thread t (as load_rope_row).
__device__ __forceinline__ void load_rope_staged(const float* sc, int row, int t, RopeRow& r) {
  const float* c = sc + row * kRopeLd;
  const float* sn = c + kRows * kRopeLd;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int d = j * 8 + 2 * t;
    const float2 a = *reinterpret_cast<const float2*>(c + d), b = *reinterpret_cast<const float2*>(c + d + kD / 2),
                 e = *reinterpret_cast<const float2*>(sn + d), f = *reinterpret_cast<const float2*>(sn + d + kD / 2);
    r.c_lo[j][0] = a.x, r.c_lo[j][1] = a.y, r.c_hi[j][0] = b.x, r.c_hi[j][1] = b.y;
    r.s_lo[j][0] = e.x, r.s_lo[j][1] = e.y, r.s_hi[j][0] = f.x, r.s_hi[j][1] = f.y;
  }
}
// Issues and commits the copies of fp16 dO rows [r0, r0 + rows) (the head's columns dO_cols, row stride p.C
// halves, 16-byte aligned: the op's own scratch) into sd, rows kDoLd halves apart.
__device__ __forceinline__ void issue_do_rows(const AttnParams& p, const __half* dO_cols, int64_t r0, int rows,
                                              __half* sd) {
  constexpr int kChunks = kD / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    cp_async16(sd + r * kDoLd + c * 8, dO_cols + (r0 + (r < rows ? r : 0)) * p.C + c * 8, r < rows);
  }
  cp_async_commit();
}
// Waits for this thread's copies, then a barrier: every thread's staged rows are visible.
__device__ __forceinline__ void staged_rows_landed() {
  cp_async_wait<0>();
  __syncthreads();
}

// The fp16 kernels' exponential: 2^x by one ex2.approx.ftz (relative error ~2^-22, far below the fp16 rounding
// that P and dS get next; 2^-inf = 0), the caller folding log2(e) into the FMA that forms x. expf costs 8-9
// instructions per element (range reduction around the same ex2), which the three fp16 kernels spend 32 times per
// thread and block: ~13 % of the backward kernel's instructions at S = 8192 (ncu, fifteenth session). The TF32 /
// 3xTF32 / fp16-v1 kernels keep expf.
constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online-softmax step of the forward for one key block (keys valid columns): this warp's 16×64 scores
// s become exp(s·scaling − m_new) in place; the running maxima m and this thread's part of the row
// sums l are updated and the output accumulator o rescaled. Rows g and g + 8 of the warp.
// Fast (the fp16 kernel): exp(x − m) as 2^(x·log2 e − m·log2 e), one FMA and one ex2 per element.
template <bool Fast = false>
__device__ __forceinline__ void softmax_step(float (&s)[8][4], int keys, float scaling, float (&m)[2], float (&l)[2],
                                             float (&o)[16][4]) {
  const int t = threadIdx.x & 3;
  float mx[2] = {m[0], m[1]};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int col = j * 8 + 2 * t + (r & 1);
      s[j][r] = col < keys ? s[j][r] * scaling : -INFINITY;
      mx[r >> 1] = fmaxf(mx[r >> 1], s[j][r]);
    }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
  }
  // Every block has ≥ 1 valid key, so mx is finite; exp(−inf − mx) = 0 on the first block.
  const float corr[2] = {expf(m[0] - mx[0]), expf(m[1] - mx[1])};
  m[0] = mx[0], m[1] = mx[1];
  float sum[2] = {0.0f, 0.0f};
  const float nm[2] = {-mx[0] * kLog2e, -mx[1] * kLog2e};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if constexpr (Fast)
        s[j][r] = exp2_approx(fmaf(s[j][r], kLog2e, nm[r >> 1]));
      else
        s[j][r] = expf(s[j][r] - mx[r >> 1]);
      sum[r >> 1] += s[j][r];
    }
  l[0] = l[0] * corr[0] + sum[0];
  l[1] = l[1] * corr[1] + sum[1];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    o[j][0] *= corr[0], o[j][1] *= corr[0];
    o[j][2] *= corr[1], o[j][3] *= corr[1];
  }
}

__device__ __forceinline__ float2 load2(const float* x) { return *reinterpret_cast<const float2*>(x); }
__device__ __forceinline__ float2 load2(const __half* x) { return __half22float2(*reinterpret_cast<const __half2*>(x)); }
__device__ __forceinline__ void store2(float* x, float a, float b) { *reinterpret_cast<float2*>(x) = make_float2(a, b); }
__device__ __forceinline__ void store2(__half* x, float a, float b) {
  *reinterpret_cast<__half2*>(x) = __floats2half2_rn(a, b);
}

// Forward epilogue: O = o / l into AO, lse = m + log l and delta = Σ_d dO·O per row of this warp. dO and
// ao: the head's columns of dO and AO (row stride p.C), fp32 or fp16.
template <class T, bool Staged = false>
__device__ __forceinline__ void forward_epilogue(const AttnParams& p, const float (&o)[16][4], const float (&m)[2],
                                                 float (&l)[2], int64_t q0, int rows, int h, const T* dO_cols,
                                                 T* ao_cols, const __half* staged = nullptr) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
  const float inv[2] = {1.0f / l[0], 1.0f / l[1]};
  float dsum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = w * 16 + g + 8 * i;
    const bool live = row < rows;
    const int64_t tok = q0 + row;
    const T* dO = dO_cols + tok * p.C;
    T* ao = ao_cols + tok * p.C;
    // The row's 16 dO pairs first, then the products and stores (loads after a store to a possibly
    // aliasing pointer cannot move above it: 16 serial round trips otherwise; ncu, 2026-12-01).
    float2 go[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if constexpr (Staged)  // the dO rows staged by issue_do_rows (zero past the block)
        go[j] = load2(staged + row * kDoLd + j * 8 + 2 * t);
      else
        go[j] = live ? load2(dO + j * 8 + 2 * t) : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float v0 = o[j][2 * i] * inv[i], v1 = o[j][2 * i + 1] * inv[i];
      if (live) {
        const int d = j * 8 + 2 * t;
        dsum[i] += go[j].x * v0 + go[j].y * v1;
        store2(ao + d, v0, v1);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    dsum[i] += __shfl_xor_sync(0xffffffffu, dsum[i], 1);
    dsum[i] += __shfl_xor_sync(0xffffffffu, dsum[i], 2);
    const int row = w * 16 + g + 8 * i;
    if (t == 0 && row < rows) {
      const int64_t at = (q0 + row) * p.H + h;
      p.lse[at] = m[i] + logf(l[i]);
      p.delta[at] = dsum[i];
    }
  }
}

// dK/dV kernels: lse and delta of query block q0 (qrows rows, zero after) into sLse, sDl [kRows].
__device__ __forceinline__ void stage_row_terms(const AttnParams& p, int64_t q0, int qrows, int h, float* sLse,
                                                float* sDl) {
  for (int r = threadIdx.x; r < kRows; r += kThreads) {
    sLse[r] = r < qrows ? p.lse[(q0 + r) * p.H + h] : 0.0f;
    sDl[r] = r < qrows ? p.delta[(q0 + r) * p.H + h] : 0.0f;
  }
}

// dQ kernels: lse and delta of this warp's rows g and g + 8 of query block q0 (zero past `rows`).
__device__ __forceinline__ void load_row_terms(const AttnParams& p, int64_t q0, int rows, int h, float (&lse)[2],
                                               float (&dl)[2]) {
  const int w = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = w * 16 + g + 8 * i;
    const int64_t at = (q0 + row) * p.H + h;
    lse[i] = row < rows ? p.lse[at] : 0.0f;
    dl[i] = row < rows ? p.delta[at] : 0.0f;
  }
}

// dQ kernels: this warp's 16×64 scores s and dP become dS·ds_factor in s, with P = exp(s·scaling − lse);
// zero for keys ≥ keys and rows ≥ rows. Fast (the fp16 kernel): P = 2^(s·scaling·log2 e − lse·log2 e).
template <bool Fast = false>
__device__ __forceinline__ void ds_rows(float (&s)[8][4], const float (&dp)[8][4], int keys, int rows,
                                        const float (&lse)[2], const float (&dl)[2], float scaling, float ds_factor) {
  const int w = threadIdx.x / 32, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const float sl = scaling * kLog2e, nl[2] = {-lse[0] * kLog2e, -lse[1] * kLog2e};
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int col = j * 8 + 2 * t + (r & 1), i = r >> 1;
      const bool live = col < keys && w * 16 + g + 8 * i < rows;
      float pr = 0.0f;
      if constexpr (Fast)
        pr = live ? exp2_approx(fmaf(s[j][r], sl, nl[i])) : 0.0f;
      else
        pr = live ? expf(s[j][r] * scaling - lse[i]) : 0.0f;
      s[j][r] = pr * (dp[j][r] - dl[i]) * ds_factor;
    }
}

// dK/dV kernels (mma.sync and wgmma: the same accumulator layout): this warp's 16 keys × 64 queries of scores s (Sᵀ)
// and dPᵀ become Pᵀ in s and dSᵀ·kDsScale in dp, with P = 2^(s·scaling·log2 e − lse·log2 e) (exp2_approx) and the
// query block's lse and delta in cLse, cDl; zero for queries ≥ qrows and keys ≥ keys.
__device__ __forceinline__ void p_ds_transposed(float (&s)[8][4], float (&dp)[8][4], int qrows, int keys,
                                                const float* cLse, const float* cDl, float scaling) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float sl = scaling * kLog2e;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int col = j * 8 + 2 * t + (r & 1);
      const bool live = col < qrows && w * 16 + g + 8 * (r >> 1) < keys;
      s[j][r] = live ? exp2_approx(fmaf(s[j][r], sl, -cLse[col] * kLog2e)) : 0.0f;
      dp[j][r] = s[j][r] * (dp[j][r] - cDl[col]) * (scaling * kDsScale);
    }
}

// The output: fp32 p.dqkv, or (HalfOut) fp16 p.dqkvh; put2 stores two adjacent columns of one row.
template <bool HalfOut>
__device__ __forceinline__ std::conditional_t<HalfOut, __half, float>* out_base(const AttnParams& p) {
  if constexpr (HalfOut)
    return p.dqkvh;
  else
    return p.dqkv;
}
__device__ __forceinline__ void put2(float* at, float x, float y) { *reinterpret_cast<float2*>(at) = make_float2(x, y); }
__device__ __forceinline__ void put2(__half* at, float x, float y) {
  *reinterpret_cast<uint32_t*>(at) = half2_bits(x, y);
}

// p.part's row for this CTA's slot, columns [part·C + h·128, + 128), all zero (a CTA with no block).
__device__ __forceinline__ void zero_part(const AttnParams& p, int part) {
  float* out = p.part + static_cast<int64_t>(blockIdx.x) * 3 * p.C + part * p.C + static_cast<int64_t>(blockIdx.y) * kD;
  for (int c = threadIdx.x; c < kD; c += kThreads) out[c] = 0.0f;
}

// Row i (token row `row`, token tok) of this thread's part of a 16×128 accumulator through the RoPE backward into out
// (columns d = j·8 + 2t + e and d + 64), summed into cs: the cos/sin values from the rows staged by issue_rope_rows
// (Staged) or from global memory, all loaded before the first store.
template <bool Staged, class T>
__device__ __forceinline__ void rope_back_row(const AttnParams& p, const float (&acc)[16][4], int i, int row,
                                              int64_t tok, int t, T* out, float (&cs)[16][2], const float* staged) {
  RopeRow rr;
  if constexpr (Staged)
    load_rope_staged(staged, row, t, rr);
  else
    load_rope_row(p.cos + tok * kD, p.sin + tok * kD, t, rr);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int d = j * 8 + 2 * t;
    float lo0, hi0, lo1, hi1;
    rope_back(rr, j, 0, acc[j][2 * i], acc[j + 8][2 * i], lo0, hi0);
    rope_back(rr, j, 1, acc[j][2 * i + 1], acc[j + 8][2 * i + 1], lo1, hi1);
    put2(out + d, lo0, lo1);
    put2(out + d + kD / 2, hi0, hi1);
    cs[j][0] += lo0, cs[j][1] += lo1, cs[j + 8][0] += hi0, cs[j + 8][1] += hi1;
  }
}

// dQ' (this warp's 16×128 accumulator) through the RoPE backward into the dq columns of p.dqkv (HalfOut:
// p.dqkvh, and the CTA's column sums into p.part; red: see mma16::cta_column_sums): columns d (tile j < 8) pair
// with d + 64 (tile j + 8) in this thread. HalfOut = false is the code as it was before HalfOut existed.
template <bool HalfOut, bool Staged = false>
__device__ __forceinline__ void store_dq(const AttnParams& p, const float (&dq)[16][4], int64_t q0, int rows, int h,
                                         int64_t ld3, float* red, const float* staged = nullptr) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float cs[16][2] = {};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = w * 16 + g + 8 * i;
    if (row >= rows) continue;
    const int64_t tok = q0 + row;
    rope_back_row<Staged>(p, dq, i, row, tok, t, out_base<HalfOut>(p) + tok * ld3 + static_cast<int64_t>(h) * kD, cs,
                          staged);
  }
  if constexpr (HalfOut) {
    mma16::cta_column_sums(cs, red, p.part + static_cast<int64_t>(blockIdx.x) * ld3 + static_cast<int64_t>(h) * kD);
    __syncthreads();  // red is free again
  }
}

// dK' (through the RoPE backward) and dV of this warp's 16 keys into the dk and dv columns of p.dqkv
// (HalfOut: p.dqkvh, and the CTA's column sums of both into p.part).
template <bool HalfOut, bool Staged = false>
__device__ __forceinline__ void store_dkdv(const AttnParams& p, const float (&dk)[16][4], const float (&dv)[16][4],
                                           int64_t k0, int keys, int h, int64_t ld3, float* red,
                                           const float* staged = nullptr) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float sk[16][2] = {}, sv[16][2] = {};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = w * 16 + g + 8 * i;
    if (row >= keys) continue;
    const int64_t tok = k0 + row;
    auto* ok = out_base<HalfOut>(p) + tok * ld3 + p.C + static_cast<int64_t>(h) * kD;
    auto* ov = ok + p.C;
    rope_back_row<Staged>(p, dk, i, row, tok, t, ok, sk, staged);
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      put2(ov + j * 8 + 2 * t, dv[j][2 * i], dv[j][2 * i + 1]);
      sv[j][0] += dv[j][2 * i], sv[j][1] += dv[j][2 * i + 1];
    }
  }
  if constexpr (HalfOut) {
    float* row = p.part + static_cast<int64_t>(blockIdx.x) * ld3 + static_cast<int64_t>(h) * kD;
    mma16::cta_column_sums(sk, red, row + p.C);
    __syncthreads();  // red is free again
    mma16::cta_column_sums(sv, red, row + 2 * p.C);
    __syncthreads();
  }
}

// Launches kernel over the grid (slots, heads, parts) of 128-thread CTAs with `smem` bytes of dynamic shared memory.
template <class Kernel>
void launch(Kernel kernel, std::size_t smem, const AttnParams& p, cudaStream_t stream, unsigned parts = 1) {
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(p.slots), static_cast<unsigned>(p.H), parts);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

// The head's q, k, v columns of p.qkvh and its dO columns of p.dAOh.
struct HalfCols {
  const __half *q, *k, *v, *dO;
};
__device__ __forceinline__ HalfCols half_cols(const AttnParams& p, int h) {
  const __half* q = p.qkvh + static_cast<int64_t>(h) * kD;
  return {q, q + p.C, q + 2 * p.C, p.dAOh + static_cast<int64_t>(h) * kD};
}

}  // namespace
}  // namespace attnbwd::cuda::varlen
