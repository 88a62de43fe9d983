// vision_mha_norm_backward's fp16 attention kernels (Default, head_dim 64): the parts the mma.sync kernels
// (vision_mha_norm_backward_attn.cu) and the sm_90a wgmma kernels (vision_mha_norm_backward_attn_sm90.cu)
// share — tile constants, the CTA's (batch, head, block), the P tile copies, and the epilogue that writes
// dQ/dK/dV in fp16 into the dQKV operand with the CTA's column sums. Internal to backends/cuda.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "check.hpp"
#include "mma_fp16.cuh"
#include "vision_mha_norm_backward_attn.cuh"

namespace attnbwd::cuda::mha::attn {

using std::int64_t;
using std::uint32_t;
using mma16::cp_async4;
using mma16::half2_bits;

constexpr int kD = kAttnHeadDim;
constexpr int kRows = kAttnBlock;
constexpr int kThreads = 128;             // 4 warps × 16 rows
constexpr int kLdP = kRows + 4;           // fp32 P tile stride: the C-layout reads of P and of Pᵀ are
                                          // conflict-free (68 ≡ 4 mod 32: rows 2t apart land 8t banks apart)
constexpr int kTileP = kRows * kLdP;      // floats per P tile (17408 B)
constexpr float kDsScale = kAttnDsScale;  // P⊙dP and dS are rounded to fp16 ×kDsScale

// The CTA's (batch, head) and block: blocks of one head are adjacent in the grid, so the CTAs sharing
// its K/V (or Q/dO) tiles run together and find them in L2.
struct Cta {
  int64_t b, bh, r0;  // r0: first row (query or key) of the block
  int h, rows;        // rows of the block inside the sequence (1..64)
  int64_t blk;        // block index along the sequence
};
__device__ __forceinline__ Cta cta_of(const AttnParams& p, int64_t index) {
  const int64_t nblk = attn_blocks(p.S);
  Cta c;
  c.bh = index / nblk;
  c.blk = index - c.bh * nblk;
  c.b = c.bh / p.H;
  c.h = static_cast<int>(c.bh - c.b * p.H);
  c.r0 = c.blk * kRows;
  c.rows = static_cast<int>(p.S - c.r0 < kRows ? p.S - c.r0 : kRows);
  return c;
}
__device__ __forceinline__ Cta cta_of(const AttnParams& p) { return cta_of(p, blockIdx.x); }

// P tiles keep each row's global 16-byte phase: tile element (r, c) is at r·kLdP + sh + c with
// sh = row_shift(row start), so a full tile is copied as 17 aligned 16-byte chunks per row (64 floats
// plus the ≤ 3 before and ≤ 3 after them: kLdP = 68 = 17·4) instead of 64 four-byte copies.
__device__ __forceinline__ int row_shift(const float* base, int64_t idx) {
  return static_cast<int>(((reinterpret_cast<std::uintptr_t>(base) >> 2) + static_cast<std::uintptr_t>(idx)) & 3);
}

// The tile P[r0 + r][c0 + c] (r < rows, c < cols; zero elsewhere) of one head's [S,S] matrix Pbh, as above.
// [p_begin, p_end): the whole P tensor; a full tile whose aligned chunks stay inside it takes the
// 16-byte path, any other tile (the sequence's last block, the tensor's first and last rows) 4-byte copies.
__device__ __forceinline__ void issue_p(float* s, const float* __restrict__ Pbh, const float* p_begin,
                                        const float* p_end, int64_t S, int64_t r0, int rows, int64_t c0, int cols) {
  const int64_t first = r0 * S + c0, last = first + (kRows - 1) * S;
  if (rows == kRows && cols == kRows && Pbh + first - row_shift(Pbh, first) >= p_begin &&
      Pbh + last - row_shift(Pbh, last) + kLdP <= p_end) {
    constexpr int kChunks = kLdP / 4;  // per row
#pragma unroll 3
    for (int i = threadIdx.x; i < kRows * kChunks; i += kThreads) {
      const int r = i / kChunks, ch = i - r * kChunks;
      const int64_t at = first + r * S;
      mma16::cp_async16(s + r * kLdP + 4 * ch, Pbh + at - row_shift(Pbh, at) + 4 * ch, true);
    }
    return;
  }
  const int c = threadIdx.x % kRows, r_first = threadIdx.x / kRows;
  constexpr int kStep = kThreads / kRows;
  for (int r = r_first; r < kRows; r += kStep) {
    const bool valid = r < rows && c < cols;
    const int64_t at = first + r * S;
    cp_async4(s + r * kLdP + row_shift(Pbh, at) + c, valid ? Pbh + at + c : Pbh, valid);
  }
}

// The same contract as issue_p with another split of a full tile's 16-byte chunks among the threads:
// 8 threads per row (4 passes of 16 rows), thread 8r' + i copying chunks i and i + 8 of its row (and
// chunk 16 for i = 0), so the row's offset and phase are formed once per pass instead of once per chunk
// (issue_p divides by 17 and forms a 64-bit row offset for every chunk). ATTNBWD_CUDA_MHA_COPY=prows|rows.
__device__ __forceinline__ void issue_p_rows(float* s, const float* __restrict__ Pbh, const float* p_begin,
                                             const float* p_end, int64_t S, int64_t r0, int rows, int64_t c0,
                                             int cols) {
  const int64_t first = r0 * S + c0, last = first + (kRows - 1) * S;
  if (rows == kRows && cols == kRows && Pbh + first - row_shift(Pbh, first) >= p_begin &&
      Pbh + last - row_shift(Pbh, last) + kLdP <= p_end) {  // issue_p's test for its 16-byte path
    constexpr int kPerRow = 8, kRowsPerPass = kThreads / kPerRow;  // 16 rows per pass
    static_assert(kLdP / 4 == 2 * kPerRow + 1, "17 chunks per row: i, i + 8, and 16 for i = 0");
    const int i = static_cast<int>(threadIdx.x) % kPerRow;
#pragma unroll
    for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
      const int r = pass * kRowsPerPass + static_cast<int>(threadIdx.x) / kPerRow;
      const int64_t at = first + r * S;
      const float* src = Pbh + at - row_shift(Pbh, at) + 4 * i;
      float* dst = s + r * kLdP + 4 * i;
      mma16::cp_async16(dst, src, true);
      mma16::cp_async16(dst + 4 * kPerRow, src + 4 * kPerRow, true);
      if (i == 0) mma16::cp_async16(dst + 8 * kPerRow, src + 8 * kPerRow, true);
    }
    return;
  }
  issue_p(s, Pbh, p_begin, p_end, S, r0, rows, c0, cols);  // its 4-byte path (the test fails there too)
}

// Epilogue: this warp's 16 rows of acc (rows ≥ rows dropped) into columns part·E + h·64 of p.dqkv's
// rows b·S + r0 + row (fp16), and the CTA's column sums of the fp32 values into its partial row.
// red: 4·64 floats of shared memory no other warp is using (mma16::cta_column_sums). Ends with every
// thread past a barrier. store_rows: the stores alone, for a thread of warp w (of 4) and lane `lane`, with its
// column sums in cs (rows past the block count as zeros); returns where the block's partial row goes.
__device__ __forceinline__ float* store_rows(const AttnParams& p, const float (&acc)[8][4], const Cta& c, int part,
                                             int w, int lane, float (&cs)[8][2]) {
  const int g = lane >> 2, t = lane & 3;
  const int64_t E = static_cast<int64_t>(p.H) * kD, E3 = 3 * E;
  __half* out = p.dqkv + (c.b * p.S + c.r0) * E3 + part * E + static_cast<int64_t>(c.h) * kD;
  const int lo = w * 16 + g, hi = lo + 8;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int col = j * 8 + 2 * t;
    float v0 = acc[j][0], v1 = acc[j][1], v2 = acc[j][2], v3 = acc[j][3];
    if (lo < c.rows)
      *reinterpret_cast<uint32_t*>(out + lo * E3 + col) = half2_bits(v0, v1);
    else
      v0 = v1 = 0.0f;
    if (hi < c.rows)
      *reinterpret_cast<uint32_t*>(out + hi * E3 + col) = half2_bits(v2, v3);
    else
      v2 = v3 = 0.0f;
    cs[j][0] = v0 + v2;
    cs[j][1] = v1 + v3;
  }
  return p.partial + (c.b * attn_blocks(p.S) + c.blk) * E3 + part * E + static_cast<int64_t>(c.h) * kD;
}
__device__ __forceinline__ void store_part(const AttnParams& p, const float (&acc)[8][4], const Cta& c, int part,
                                           float* red) {
  float cs[8][2];
  float* out = store_rows(p, acc, c, part, threadIdx.x / 32, threadIdx.x & 31, cs);
  mma16::cta_column_sums(cs, red, out);
}

// ---- the element math of the two kernels (the accumulators are the mma.sync C layout of each warp's 16
// rows: lane 4g + t holds rows g, g + 8 and columns 8j + 2t, 8j + 2t + 1) ----

// Query-major: this lane's P values of the block's first 8·J columns (cP_lo, cP_hi: its rows g and g + 8 at column
// 2t; J = 8 a whole block, 2 the sm_90a kernels' narrow block).
template <int J>
__device__ __forceinline__ void load_p(const float* cP_lo, const float* cP_hi, float (&pr)[J][4]) {
#pragma unroll
  for (int j = 0; j < J; ++j)
    pr[j][0] = cP_lo[j * 8], pr[j][1] = cP_lo[j * 8 + 1], pr[j][2] = cP_hi[j * 8], pr[j][3] = cP_hi[j * 8 + 1];
}

// Query-major: dp ← P⊙dP·kDsScale and dsum (δ·kDsScale's partial sums of rows g, g + 8) += the same products. V
// comes in fp16 as V·kDsScale (exact: a power of 2), so dp holds dP·kDsScale already and one multiply per element
// forms the fp16 operand P⊙dP·kDsScale. J: load_p's.
template <int J>
__device__ __forceinline__ void p_and_w(const float (&pr)[J][4], float (&dp)[J][4], float (&dsum)[2]) {
#pragma unroll
  for (int j = 0; j < J; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      dp[j][r] *= pr[j][r];
      dsum[r >> 1] += dp[j][r];
    }
}

// The quad's partial row sums (lanes 4g .. 4g + 3) added, the same order on every lane.
__device__ __forceinline__ void quad_sums(float (&dsum)[2]) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    dsum[i] += __shfl_xor_sync(0xffffffffu, dsum[i], 1);
    dsum[i] += __shfl_xor_sync(0xffffffffu, dsum[i], 2);
  }
}
// x ← (x/kDsScale − δ·y)·scale with δ = dsum/kDsScale, for the rows of dsum.
__device__ __forceinline__ void dq_from_sums(const float (&dsum)[2], float (&x)[8][4], const float (&y)[8][4],
                                             float scale) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float dl = dsum[r >> 1] * (1.0f / kDsScale);  // exact
      x[j][r] = (x[j][r] * (1.0f / kDsScale) - dl * y[j][r]) * scale;
    }
}
// Query-major, after the last block: δ·kDsScale of rows g, g + 8 (the quad's partial sums, as the dK/dV kernels
// read it) into p.delta, and x ← dQ = (X − δ·kDsScale·Y)/kDsScale·scale (the divisions by kDsScale exact).
__device__ __forceinline__ void finish_dq(const AttnParams& p, const Cta& c, float (&dsum)[2], float (&x)[8][4],
                                          const float (&y)[8][4]) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  quad_sums(dsum);
  const int lo = w * 16 + g;
  if (t == 0) {
    if (lo < c.rows) p.delta[c.bh * p.S + c.r0 + lo] = dsum[0];
    if (lo + 8 < c.rows) p.delta[c.bh * p.S + c.r0 + lo + 8] = dsum[1];
  }
  dq_from_sums(dsum, x, y, p.scale);
}

// Key-major: this lane's Pᵀ values (rows: its warp's 16 keys; columns: the block's queries) from the P
// tile cP; sh0, sh1: the P phase of query rows 2t and 2t + 1 (rows 8 apart are 32·S bytes apart, a
// multiple of 16, so it depends on 2t + e alone).
__device__ __forceinline__ void p_transposed(const float* cP, int sh0, int sh1, float (&pt)[8][4]) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      pt[j][r] = cP[(j * 8 + 2 * t + (r & 1)) * kLdP + ((r & 1) ? sh1 : sh0) + w * 16 + g + 8 * (r >> 1)];
}

// Key-major: dpt ← dSᵀ·kDsScale = Pᵀ⊙(dPᵀ − δ)·kDsScale, where dpt holds dPᵀ·kDsScale and cDl δ·kDsScale of the
// block's queries (V came as V·kDsScale), with the lane's two δ values of each query pair in one 8-byte load (cDl
// 8-byte aligned). J: the block's first 8·J queries (load_p's J).
template <int J>
__device__ __forceinline__ void ds_transposed(const float (&pt)[J][4], float (&dpt)[J][4], const float* cDl) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < J; ++j) {
    const float2 dl = *reinterpret_cast<const float2*>(cDl + j * 8 + 2 * t);
#pragma unroll
    for (int r = 0; r < 4; ++r) dpt[j][r] = pt[j][r] * (dpt[j][r] - ((r & 1) ? dl.y : dl.x));
  }
}
// The same with the lane's δ·kDsScale values already in registers: dl[j][e] for query column j·8 + 2t + e.
__device__ __forceinline__ void ds_transposed(const float (&pt)[8][4], float (&dpt)[8][4], const float (&dl)[8][2]) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) dpt[j][r] = pt[j][r] * (dpt[j][r] - dl[j][r & 1]);
}

// Launches one of the kernels: one CTA per (batch, head, 64-row block), the blocks of a head adjacent
// (`split` CTAs per block, adjacent, when the kernel splits its loop).
template <class Kernel>
void launch(Kernel kernel, std::size_t smem, const AttnParams& p, cudaStream_t stream, int split = 1) {
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const auto grid = static_cast<unsigned>(attn_blocks(p.S) * p.B * p.H * split);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda::mha::attn
