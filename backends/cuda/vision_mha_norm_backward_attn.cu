// vision_mha_norm_backward's attention backward on fp16 tensor cores (Default mode, head_dim 64).
//
// Per (batch b, head h), with P the given [S,S] probabilities, dO = dA's head columns, δ_i = Σ_j P_ij·dP_ij:
//   dP = dO·Vᵀ,  dS = P⊙(dP − δ),  dV = Pᵀ·dO,  dQ = (dS·K)·scale,  dK = dSᵀ·Q·scale.
// Two kernels, each reading P once (fp32, 4-byte cp.async: rows of 577 floats are only 4-byte aligned)
// and never writing a P-sized array:
//  - attn_dq, one CTA per 64 query rows, streams the key blocks: dP = dO·Vᵀ in registers, then
//    X += (P⊙dP)·K and Y += P·K and δ += Σ P⊙dP, so that dQ = (X − δ·Y)·scale (= (dS·K)·scale, as
//    dS·K = Σ_j P_ij(dP_ij − δ_i)K_j) is formed in one pass; δ goes to a [B,H,S] scratch.
//  - attn_dkv, one CTA per 64 keys, streams the query blocks: dPᵀ = V·dOᵀ, dV += Pᵀ·dO,
//    dSᵀ = Pᵀ⊙(dPᵀ − δ), dK += dSᵀ·Q.
// 4 warps, each owning 16 rows (queries, or keys) of the CTA's block; the streamed tiles (P fp32; K, V
// or Q, dO fp16; δ) are double-buffered with cp.async (mma16::stream_blocks), fragments come from
// ldmatrix, and a warp's 16×64 fp32 accumulator becomes the next product's A operand in registers
// (mma16::to_afrag). P⊙dP and dS are multiplied by kDsScale (exact) before rounding to fp16 so small
// values stay normal; the accumulators are scaled back. The epilogues write dQ, dK, dV in fp16 straight
// into the merged dQKV operand of the projection GEMMs and the column sums of the fp32 values (over the
// CTA's rows, in a fixed order) into one partial row per CTA for grad_qkv_bias. No atomics.
#include <cuda_fp16.h>

#include <cstdint>

#include "check.hpp"
#include "mma_fp16.cuh"
#include "vision_mha_norm_backward_attn.cuh"

namespace attnbwd::cuda::mha {
namespace {

using std::int64_t;
using std::uint32_t;
using mma16::cp_async4;
using mma16::half2_bits;
using mma16::scale_acc;
using mma16::stream_blocks;
using mma16::to_afrag;
using mma16::zero;

constexpr int kD = kAttnHeadDim;
constexpr int kRows = kAttnBlock;
constexpr int kThreads = 128;             // 4 warps × 16 rows
constexpr int kLdH = kD + 8;              // fp16 tile stride: 144 B, ldmatrix rows in distinct bank groups
constexpr int kLdP = kRows + 4;           // fp32 P tile stride: the C-layout reads of P and of Pᵀ are
                                          // conflict-free (68 ≡ 4 mod 32: rows 2t apart land 8t banks apart)
constexpr int kTileH = kRows * kLdH;      // halves per fp16 tile (9216 B)
constexpr int kTileP = kRows * kLdP;      // floats per P tile (17408 B)
constexpr float kDsScale = 16.0f;         // P⊙dP and dS are rounded to fp16 ×kDsScale

constexpr std::size_t kSmemDq = sizeof(float) * 2 * kTileP + sizeof(__half) * 5 * kTileH;
constexpr std::size_t kSmemDkv = sizeof(float) * (2 * kTileP + 2 * kRows) + sizeof(__half) * 5 * kTileH;

// The CTA's (batch, head) and block: blocks of one head are adjacent in the grid, so the CTAs sharing
// its K/V (or Q/dO) tiles run together and find them in L2.
struct Cta {
  int64_t b, bh, r0;  // r0: first row (query or key) of the block
  int h, rows;        // rows of the block inside the sequence (1..64)
  int64_t blk;        // block index along the sequence
};
__device__ __forceinline__ Cta cta_of(const AttnParams& p) {
  const int64_t nblk = attn_blocks(p.S);
  Cta c;
  c.bh = static_cast<int64_t>(blockIdx.x) / nblk;
  c.blk = static_cast<int64_t>(blockIdx.x) - c.bh * nblk;
  c.b = c.bh / p.H;
  c.h = static_cast<int>(c.bh - c.b * p.H);
  c.r0 = c.blk * kRows;
  c.rows = static_cast<int>(p.S - c.r0 < kRows ? p.S - c.r0 : kRows);
  return c;
}

__device__ __forceinline__ void issue_h(__half* s, const __half* g, int64_t ldg, int64_t row0, int rows) {
  mma16::issue_tile<kRows, kD, kLdH, kThreads>(s, g, ldg, row0, rows);
}

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

// acc[j] += A·Bᵀ over the 64 columns: A = 16 rows of an fp16 tile, B = rows [n][d] of one.
__device__ __forceinline__ void mma_abt(float (&acc)[8][4], const __half* A, const __half* B) {
  mma16::mma_abt<8, kD, kLdH>(acc, A, B);
}
// acc[j] += A·B: A from to_afrag (k = 64 rows of B), B = rows [k][d] of an fp16 tile.
__device__ __forceinline__ void mma_rb(float (&acc)[8][4], const uint32_t (&a)[4][4], const __half* B) {
  mma16::mma_rb<8, kLdH>(acc, a, B);
}

// Epilogue: this warp's 16 rows of acc (rows ≥ rows dropped) into columns part·E + h·64 of p.dqkv's
// rows b·S + r0 + row (fp16), and the CTA's column sums of the fp32 values into its partial row.
// red: 4·64 floats of shared memory no other warp is using. Ends with every thread past a barrier.
__device__ __forceinline__ void store_part(const AttnParams& p, const float (&acc)[8][4], const Cta& c, int part,
                                           float* red) {
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t E = static_cast<int64_t>(p.H) * kD, E3 = 3 * E;
  __half* out = p.dqkv + (c.b * p.S + c.r0) * E3 + part * E + static_cast<int64_t>(c.h) * kD;
  const int lo = w * 16 + g, hi = lo + 8;
  float cs[8][2];
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
#pragma unroll
  for (int o = 4; o < 32; o *= 2)  // over the 8 row groups g (lanes 4 apart), same order on every lane
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      cs[j][0] += __shfl_xor_sync(0xffffffffu, cs[j][0], o);
      cs[j][1] += __shfl_xor_sync(0xffffffffu, cs[j][1], o);
    }
  if (g == 0)
#pragma unroll
    for (int j = 0; j < 8; ++j) red[w * kD + j * 8 + 2 * t] = cs[j][0], red[w * kD + j * 8 + 2 * t + 1] = cs[j][1];
  __syncthreads();
  if (threadIdx.x < kD) {
    const int col = threadIdx.x;
    const float s = ((red[col] + red[kD + col]) + red[2 * kD + col]) + red[3 * kD + col];
    p.partial[(c.b * attn_blocks(p.S) + c.blk) * E3 + part * E + static_cast<int64_t>(c.h) * kD + col] = s;
  }
}

__global__ void __launch_bounds__(kThreads, 2) attn_dq(const AttnParams p) {
  const Cta c = cta_of(p);
  const int64_t S = p.S, E = static_cast<int64_t>(p.H) * kD;
  extern __shared__ float4 smem4[];
  float* sP = reinterpret_cast<float*>(smem4);                // [2] P tiles (rows: queries)
  __half* sdO = reinterpret_cast<__half*>(sP + 2 * kTileP);   // this block's dO
  __half* sK = sdO + kTileH;                                  // [2]
  __half* sV = sK + 2 * kTileH;                               // [2]
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float* Pbh = p.P + c.bh * S * S;
  const __half* K = p.k + c.bh * S * kD;
  const __half* V = p.v + c.bh * S * kD;

  const float* p_begin = p.P;
  const float* p_end = p.P + p.B * p.H * S * S;
  // this lane's rows g and g + 8: their P phase (key blocks start at multiples of 64 floats: the same in all)
  const int sh_lo = row_shift(Pbh, (c.r0 + w * 16 + g) * S), sh_hi = row_shift(Pbh, (c.r0 + w * 16 + g + 8) * S);
  issue_h(sdO, p.dO + c.b * S * E + static_cast<int64_t>(c.h) * kD, E, c.r0, c.rows);  // with the first block
  float x[8][4], y[8][4];
  zero(x);
  zero(y);
  float dsum[2] = {0.0f, 0.0f};  // rows g and g + 8: this lane's part of δ
  stream_blocks<kRows>(
      0, S,
      [&](int64_t k1, int keys1, int to) {
        issue_p(sP + to * kTileP, Pbh, p_begin, p_end, S, c.r0, c.rows, k1, keys1);
        issue_h(sK + to * kTileH, K, kD, k1, keys1);
        issue_h(sV + to * kTileH, V, kD, k1, keys1);
      },
      [&](int buf, int) {
        const float* cP_lo = sP + buf * kTileP + (w * 16 + g) * kLdP + sh_lo + 2 * t;
        const float* cP_hi = sP + buf * kTileP + (w * 16 + g + 8) * kLdP + sh_hi + 2 * t;
        const __half* cK = sK + buf * kTileH;
        float dp[8][4], pr[8][4];
        zero(dp);
        mma_abt(dp, sdO + w * 16 * kLdH, sV + buf * kTileH);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          pr[j][0] = cP_lo[j * 8], pr[j][1] = cP_lo[j * 8 + 1], pr[j][2] = cP_hi[j * 8], pr[j][3] = cP_hi[j * 8 + 1];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float pdp = pr[j][r] * dp[j][r];
            dsum[r >> 1] += pdp;
            dp[j][r] = pdp * kDsScale;
          }
        }
        uint32_t a[4][4];
        to_afrag(a, pr);
        mma_rb(y, a, cK);
        to_afrag(a, dp);
        mma_rb(x, a, cK);
      });
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // δ of rows g, g + 8: the quad's four partial sums
    dsum[i] += __shfl_xor_sync(0xffffffffu, dsum[i], 1);
    dsum[i] += __shfl_xor_sync(0xffffffffu, dsum[i], 2);
  }
  const int lo = w * 16 + g;
  if (t == 0) {
    if (lo < c.rows) p.delta[c.bh * S + c.r0 + lo] = dsum[0];
    if (lo + 8 < c.rows) p.delta[c.bh * S + c.r0 + lo + 8] = dsum[1];
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) x[j][r] = (x[j][r] * (1.0f / kDsScale) - dsum[r >> 1] * y[j][r]) * p.scale;
  store_part(p, x, c, 0, sP);  // stream_blocks ended with a barrier: the P tiles are free
}

__global__ void __launch_bounds__(kThreads, 2) attn_dkv(const AttnParams p) {
  const Cta c = cta_of(p);
  const int64_t S = p.S, E = static_cast<int64_t>(p.H) * kD;
  extern __shared__ float4 smem4[];
  float* sP = reinterpret_cast<float*>(smem4);   // [2] P tiles (rows: queries, columns: this block's keys)
  float* sDl = sP + 2 * kTileP;                  // [2][64] δ of the query block
  __half* sV = reinterpret_cast<__half*>(sDl + 2 * kRows);  // this block's V
  __half* sQ = sV + kTileH;                                 // [2]
  __half* sdO = sQ + 2 * kTileH;                            // [2]
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float* Pbh = p.P + c.bh * S * S;
  const __half* Q = p.q + c.bh * S * kD;
  const __half* dO = p.dO + c.b * S * E + static_cast<int64_t>(c.h) * kD;
  const float* delta = p.delta + c.bh * S;

  const float* p_begin = p.P;
  const float* p_end = p.P + p.B * p.H * S * S;
  int64_t q_at = 0;  // first query of the block the body is on
  issue_h(sV, p.v + c.bh * S * kD, kD, c.r0, c.rows);  // with the first block
  float dk[8][4], dv[8][4];
  zero(dk);
  zero(dv);
  stream_blocks<kRows>(
      0, S,
      [&](int64_t q1, int qrows1, int to) {
        issue_p(sP + to * kTileP, Pbh, p_begin, p_end, S, q1, qrows1, c.r0, c.rows);
        issue_h(sQ + to * kTileH, Q, kD, q1, qrows1);
        issue_h(sdO + to * kTileH, dO, E, q1, qrows1);
        if (threadIdx.x < kRows) {
          const bool valid = static_cast<int>(threadIdx.x) < qrows1;
          cp_async4(sDl + to * kRows + threadIdx.x, valid ? delta + q1 + threadIdx.x : delta, valid);
        }
      },
      [&](int buf, int) {
        const float* cP = sP + buf * kTileP;
        const __half* cQ = sQ + buf * kTileH;
        const __half* cdO = sdO + buf * kTileH;
        const float* cDl = sDl + buf * kRows;
        // Transposed: rows are this warp's 16 keys, columns the block's 64 queries.
        // P phase of this lane's query rows j·8 + 2t + e: rows 8 apart are 32·S bytes apart, a multiple of
        // 16, so it depends on 2t + e alone
        const int sh0 = row_shift(Pbh, (q_at + 2 * t) * S + c.r0), sh1 = row_shift(Pbh, (q_at + 2 * t + 1) * S + c.r0);
        q_at += kRows;
        float dpt[8][4], pt[8][4];
        zero(dpt);
        mma_abt(dpt, sV + w * 16 * kLdH, cdO);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            pt[j][r] = cP[(j * 8 + 2 * t + (r & 1)) * kLdP + ((r & 1) ? sh1 : sh0) + w * 16 + g + 8 * (r >> 1)];
        uint32_t a[4][4];
        to_afrag(a, pt);
        mma_rb(dv, a, cdO);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            dpt[j][r] = pt[j][r] * (dpt[j][r] - cDl[j * 8 + 2 * t + (r & 1)]) * kDsScale;
        to_afrag(a, dpt);
        mma_rb(dk, a, cQ);
      });
  scale_acc(dk, p.scale / kDsScale);
  store_part(p, dk, c, 1, sP);
  store_part(p, dv, c, 2, sP + 4 * kD);
}

template <class Kernel>
void launch(Kernel kernel, std::size_t smem, const AttnParams& p, cudaStream_t stream) {
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const auto grid = static_cast<unsigned>(attn_blocks(p.S) * p.B * p.H);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_backward(const AttnParams& p, cudaStream_t stream) {
  launch(attn_dq, kSmemDq, p, stream);
  launch(attn_dkv, kSmemDkv, p, stream);
}

}  // namespace attnbwd::cuda::mha
