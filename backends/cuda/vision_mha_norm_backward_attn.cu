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
// (mma16::to_afrag). V comes as V·kDsScale (exact), so dP, P⊙dP, δ and dS come out ×kDsScale and small values
// stay normal when P⊙dP and dS are rounded to fp16; the accumulators are scaled back. The epilogues write dQ, dK,
// dV in fp16 straight into the merged dQKV operand of the projection GEMMs and the column sums of the fp32 values
// (over the CTA's rows, in a fixed order) into one partial row per CTA for grad_qkv_bias. No atomics.
#include <cuda_fp16.h>

#include <cstdint>

#include "check.hpp"
#include "mma_fp16.cuh"
#include "vision_mha_norm_backward_attn.cuh"
#include "vision_mha_norm_backward_attn_parts.cuh"

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
using namespace attn;  // the shared parts (vision_mha_norm_backward_attn_parts.cuh)

constexpr int kLdH = kD + 8;              // fp16 tile stride: 144 B, ldmatrix rows in distinct bank groups
constexpr int kTileH = kRows * kLdH;      // halves per fp16 tile (9216 B)

constexpr std::size_t kSmemDq = sizeof(float) * 2 * kTileP + sizeof(__half) * 5 * kTileH;
constexpr std::size_t kSmemDkv = sizeof(float) * (2 * kTileP + 2 * kRows) + sizeof(__half) * 5 * kTileH;

__device__ __forceinline__ void issue_h(__half* s, const __half* g, int64_t ldg, int64_t row0, int rows) {
  mma16::issue_tile<kRows, kD, kLdH, kThreads>(s, g, ldg, row0, rows);
}

// acc[j] += A·Bᵀ over the 64 columns: A = 16 rows of an fp16 tile, B = rows [n][d] of one.
__device__ __forceinline__ void mma_abt(float (&acc)[8][4], const __half* A, const __half* B) {
  mma16::mma_abt<8, kD, kLdH>(acc, A, B);
}
// acc[j] += A·B: A from to_afrag (k = 64 rows of B), B = rows [k][d] of an fp16 tile.
__device__ __forceinline__ void mma_rb(float (&acc)[8][4], const uint32_t (&a)[4][4], const __half* B) {
  mma16::mma_rb<8, kLdH>(acc, a, B);
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
        load_p(cP_lo, cP_hi, pr);
        p_and_w(pr, dp, dsum);
        uint32_t a[4][4];
        to_afrag(a, pr);
        mma_rb(y, a, cK);
        to_afrag(a, dp);
        mma_rb(x, a, cK);
      });
  finish_dq(p, c, dsum, x, y);
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
  const int w = threadIdx.x / 32, t = threadIdx.x & 3;
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
        // P phase of this lane's query rows 2t + e (see p_transposed)
        const int sh0 = row_shift(Pbh, (q_at + 2 * t) * S + c.r0), sh1 = row_shift(Pbh, (q_at + 2 * t + 1) * S + c.r0);
        q_at += kRows;
        float dpt[8][4], pt[8][4];
        zero(dpt);
        mma_abt(dpt, sV + w * 16 * kLdH, cdO);
        p_transposed(cP, sh0, sh1, pt);
        uint32_t a[4][4];
        to_afrag(a, pt);
        mma_rb(dv, a, cdO);
        ds_transposed(pt, dpt, cDl);
        to_afrag(a, dpt);
        mma_rb(dk, a, cQ);
      });
  scale_acc(dk, p.scale / kDsScale);
  store_part(p, dk, c, 1, sP);
  store_part(p, dv, c, 2, sP + 4 * kD);
}

}  // namespace

void attention_backward(const AttnParams& p, cudaStream_t stream) {
  launch(attn_dq, kSmemDq, p, stream);
  launch(attn_dkv, kSmemDkv, p, stream);
}

}  // namespace attnbwd::cuda::mha
