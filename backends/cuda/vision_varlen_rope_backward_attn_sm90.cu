// vision_varlen_rope_backward (spec §5): the varlen attention's forward recompute, dQ and dK/dV kernels on sm_90a
// wgmma (ATTNBWD_CUDA_VARLEN_WGMMA; the mma.sync kernels of vision_varlen_rope_backward_attn.cu otherwise).
//
// Why: the mma.sync dK/dV kernel runs at 2 warps per scheduler with 16-row warp tiles, latency-bound (ncu at
// S = 8192: 31 % tensor-pipe time, perf/NOTES.md, fifteenth session). Here one warpgroup owns the CTA's 64 keys
// (K and V resident, 128-byte-swizzled) and streams the sequence's query blocks (Q, dO, lse, delta; two buffers
// by cp.async, as the gqa kv kernel does). Per query block of 64:
//  1. Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: wgmma m64n64k16 from shared memory (both operands K-major; k = head_dim), one
//     commit group;
//  2. Pᵀ = 2^(Sᵀ·scaling·log2 e − lse·log2 e) and dSᵀ = Pᵀ⊙(dPᵀ − delta)·scaling·kDsScale element-wise in the
//     accumulator layout (which is mma.sync's C layout: the same code and masks as the mma.sync dK/dV kernel),
//     packed to fp16 A fragments;
//  3. dV += Pᵀ·dO and dK += dSᵀ·Q: wgmma with A from registers and B an N-major tile (rows = queries), two
//     64-column halves each.
// The accumulators dK, dV (64 keys × 128 per warpgroup, 16 rows per warp in the C layout) go through the same
// epilogue as the mma.sync kernel (store_dkdv: RoPE backward, fp16 or fp32 dQKV, the CTA's bias column sums).
// The dQ kernel is the same with the roles turned: one warpgroup per 64 queries (Q, dO, lse, delta resident), the
// key blocks (K, V) streamed; S = Q·Kᵀ and dP = dO·Vᵀ from shared memory, dS by the mma.sync dQ kernel's ds_rows,
// dQ += dS·K with dS in registers and K N-major; its epilogue is store_dq. The forward recompute likewise: Q
// resident, S = Q·Kᵀ, the online softmax step, O += P·V with V N-major, its epilogue (AO, lse, delta).
// Rows past a sequence's end (keys or queries) are zero-filled tiles and masked out of P, as in the mma.sync
// kernels. The products accumulate in another order than the mma.sync kernels': not their bits (oracle tests).
// Built in the fifteenth session; first run and measured in the sixteenth (perf/NOTES.md), the default on sm_90.
#include <cstdint>

#include "check.hpp"
#include "sm90/ptx.cuh"
#include "vision_varlen_rope_backward_attn_parts.cuh"

namespace attnbwd::cuda::varlen {
namespace {

constexpr int kSub = kRows * 64 * 2;  // one swizzled [64][64] fp16 half tile: 8 KB
constexpr int kTileW = 2 * kSub;      // [64][128]: head_dim 0-63 | 64-127
// Shared memory: K, V; two buffers of Q and dO; two of lse and delta [64] each; +1 KB to align the tiles to 1024 B.
// (The dQ kernel: Q, dO; two buffers of K and V; the same size is enough.) The forward: Q; two buffers of K and V.
constexpr std::size_t kSmemDkvWg =
    static_cast<std::size_t>(kTileW) * 6 + sizeof(float) * 4 * kRows + 1024;
constexpr std::size_t kSmemFwdWg = static_cast<std::size_t>(kTileW) * 5 + 1024;

#if defined(ATTNBWD_SM90_DEVICE)

using namespace sm90;

// Issues the copy of rows [row0, row0 + rows) × 128 halves of a row-major fp16 matrix (row stride ldg halves,
// 16-byte aligned rows) into a swizzled tile: 16-byte chunk c of row r at half c / 8, chunk (c % 8) ^ (r % 8);
// rows ≥ rows are zero-filled (so masked rows hold zeros, never stale bits, in the products). rows ≥ 1.
__device__ __forceinline__ void issue_tile_sw(std::uint8_t* s, const __half* __restrict__ g, int64_t ldg,
                                              int64_t row0, int rows) {
#pragma unroll
  for (int u = 0; u < kRows * 16 / kThreads; ++u) {
    const int i = static_cast<int>(threadIdx.x) + u * kThreads, r = i >> 4, c = i & 15;
    const bool valid = r < rows;
    mma16::cp_async16(s + (c >> 3) * kSub + r * 128 + (((c & 7) ^ (r & 7)) << 4),
                      g + (row0 + (valid ? r : 0)) * ldg + c * 8, valid);
  }
}

// Descriptors of a swizzled tile at head_dim half 0: K-major (k step: 16 columns = 32 bytes, +2 in the address
// field; half: +kSub / 16) and N-major (k step: 16 rows = 2,048 bytes, +128; one 64-wide N chunk per half).
__device__ __forceinline__ std::uint64_t kmajor_desc(const std::uint8_t* tile) {
  return smem_desc(smem_addr(tile), 16, 1024);
}
__device__ __forceinline__ std::uint64_t nmajor_desc(const std::uint8_t* tile) {
  return smem_desc(smem_addr(tile), kSub, 1024);
}

// acc (64 rows × 128 as two 64-column halves) += A·B over k = 64: A this warp's fp16 fragments, B an N-major
// [64][128] tile given by its half-0 descriptor.
__device__ __forceinline__ void rs_n128(float (&acc)[2][8][4], const std::uint32_t (&a)[4][4], std::uint64_t desc) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      wgmma_m64n64k16_rs<Mma16::F16, 1>(acc[hf], a[kc], desc + hf * (kSub >> 4) + kc * (2048 >> 4), 1);
}

__device__ __forceinline__ void fence_frags(std::uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[k][i])::"memory");
}

// s = A1·B1ᵀ and (Two) d = A2·B2ᵀ over k = head_dim: SS wgmma on K-major tiles given by their head_dim-half-0
// descriptors, one commit group, waited for.
template <bool Two>
__device__ __forceinline__ void ss_scores(float (&s)[8][4], float (&d)[8][4], std::uint64_t a1, std::uint64_t b1,
                                          std::uint64_t a2, std::uint64_t b2) {
  mma16::zero(s);
  fence_acc(s);
  if constexpr (Two) {
    mma16::zero(d);
    fence_acc(d);
  }
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const std::uint64_t off = (kk >> 2) * (kSub >> 4) + (kk & 3) * 2;
    wgmma_m64n64k16_ss<Mma16::F16, 0>(s, a1 + off, b1 + off, kk);
    if constexpr (Two) wgmma_m64n64k16_ss<Mma16::F16, 0>(d, a2 + off, b2 + off, kk);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(s);
  if constexpr (Two) fence_acc(d);
}

// acc1 += A1·B1 and (Two) acc2 += A2·B2 (rs_n128: register A fragments, N-major B tiles), one commit group, waited
// for; the fragments and accumulators pinned before the fence and after the wait.
template <bool Two>
__device__ __forceinline__ void rs_grads(float (&acc1)[2][8][4], std::uint32_t (&a1)[4][4], std::uint64_t b1,
                                        float (&acc2)[2][8][4], std::uint32_t (&a2)[4][4], std::uint64_t b2) {
  fence_frags(a1);
  if constexpr (Two) fence_frags(a2);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    fence_acc(acc1[hf]);
    if constexpr (Two) fence_acc(acc2[hf]);
  }
  wgmma_fence();
  rs_n128(acc1, a1, b1);
  if constexpr (Two) rs_n128(acc2, a2, b2);
  wgmma_commit();
  wgmma_wait<0>();
  fence_frags(a1);
  if constexpr (Two) fence_frags(a2);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    fence_acc(acc1[hf]);
    if constexpr (Two) fence_acc(acc2[hf]);
  }
}

template <bool HalfOut>
__device__ __forceinline__ void dkv_wg(const AttnParams& p) {
  Block b;
  if (!block_of(p, b)) {
    if constexpr (HalfOut) zero_part(p, 1), zero_part(p, 2);
    return;
  }
  const int64_t k0 = b.b0, ld3 = b.ld3;
  const int keys = b.n, h = b.h;
  const HalfCols hc = half_cols(p, h);
  extern __shared__ float4 smem4[];
  std::uint8_t* sK = align_smem_1024(smem4);
  std::uint8_t* sV = sK + kTileW;
  std::uint8_t* sQ = sV + kTileW;      // [2]
  std::uint8_t* sdO = sQ + 2 * kTileW;  // [2]
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kTileW);  // [2][kRows]
  float* sDl = sLse + 2 * kRows;                             // [2][kRows]

  issue_tile_sw(sK, hc.k, ld3, k0, keys);  // committed with the first query block
  issue_tile_sw(sV, hc.v, ld3, k0, keys);
  // Descriptors at buffer 0; a buffer adds kTileW / 16 to the address field (every address < 256 KB).
  const std::uint64_t dKk = kmajor_desc(sK), dVk = kmajor_desc(sV), dQk = kmajor_desc(sQ), dOk = kmajor_desc(sdO),
                      dQn = nmajor_desc(sQ), dOn = nmajor_desc(sdO);
  float dk[2][8][4], dv[2][8][4];
  mma16::zero(dk[0]);
  mma16::zero(dk[1]);
  mma16::zero(dv[0]);
  mma16::zero(dv[1]);
  mma16::stream_blocks<kRows, true>(
      b.start, b.end,
      [&](int64_t q1, int qrows1, int to) {
        issue_tile_sw(sQ + to * kTileW, hc.q, ld3, q1, qrows1);
        issue_tile_sw(sdO + to * kTileW, hc.dO, p.C, q1, qrows1);
        stage_row_terms(p, q1, qrows1, h, sLse + to * kRows, sDl + to * kRows);
      },
      [&](int buf, int qrows) {
        const std::uint64_t bq = static_cast<std::uint64_t>(buf) * (kTileW >> 4);
        const float* cLse = sLse + buf * kRows;
        const float* cDl = sDl + buf * kRows;
        // 1. Sᵀ and dPᵀ (rows: this warpgroup's keys; columns: the block's queries)
        float s[8][4], dp[8][4];
        ss_scores<true>(s, dp, dKk, dQk + bq, dVk, dOk + bq);
        // 2. Pᵀ and dSᵀ·kDsScale, as the mma.sync dK/dV kernel forms them
        p_ds_transposed(s, dp, qrows, keys, cLse, cDl, p.scaling);
        std::uint32_t ap[4][4], as[4][4];
        mma16::to_afrag(ap, s);
        mma16::to_afrag(as, dp);
        // 3. dV += Pᵀ·dO, dK += dSᵀ·Q
        rs_grads<true>(dv, ap, dOn + bq, dk, as, dQn + bq);
      });
  // [2][8][4] halves = [16][4] column tiles of the mma.sync layout (tile j < 8: head_dim 8j.., j ≥ 8: 64 + 8(j − 8)..)
  // stream_blocks ended with a barrier: the tiles are free for the staged cos/sin rows and the column sums' scratch
  float* staged = reinterpret_cast<float*>(sK + kStageOffset);
  issue_rope_rows(p, k0, keys, staged);
  float(&dk16)[16][4] = reinterpret_cast<float(&)[16][4]>(dk);
  float(&dv16)[16][4] = reinterpret_cast<float(&)[16][4]>(dv);
  mma16::scale_acc(dk16, 1.0f / kDsScale);
  staged_rows_landed();
  store_dkdv<HalfOut, true>(p, dk16, dv16, k0, keys, h, ld3, reinterpret_cast<float*>(sK), staged);
}

// dQ: one warpgroup per (64-query block, head); Q, dO and the rows' lse and delta resident, K and V streamed.
template <bool HalfOut>
__device__ __forceinline__ void dq_wg(const AttnParams& p) {
  Block b;
  if (!block_of(p, b)) {
    if constexpr (HalfOut) zero_part(p, 0);
    return;
  }
  const int64_t q0 = b.b0, ld3 = b.ld3;
  const int rows = b.n, h = b.h;
  const HalfCols hc = half_cols(p, h);
  extern __shared__ float4 smem4[];
  std::uint8_t* sQ = align_smem_1024(smem4);
  std::uint8_t* sdO = sQ + kTileW;
  std::uint8_t* sK = sdO + kTileW;     // [2]
  std::uint8_t* sV = sK + 2 * kTileW;  // [2]

  issue_tile_sw(sQ, hc.q, ld3, q0, rows);  // committed with the first key block
  issue_tile_sw(sdO, hc.dO, p.C, q0, rows);
  float lse[2], dl[2];
  load_row_terms(p, q0, rows, h, lse, dl);
  const std::uint64_t dQk = kmajor_desc(sQ), dOk = kmajor_desc(sdO), dKk = kmajor_desc(sK), dVk = kmajor_desc(sV),
                      dKn = nmajor_desc(sK);
  float dq[2][8][4];
  mma16::zero(dq[0]);
  mma16::zero(dq[1]);
  mma16::stream_blocks<kRows, true>(
      b.start, b.end,
      [&](int64_t k1, int keys1, int to) {
        issue_tile_sw(sK + to * kTileW, hc.k, ld3, k1, keys1);
        issue_tile_sw(sV + to * kTileW, hc.v, ld3, k1, keys1);
      },
      [&](int buf, int keys) {
        const std::uint64_t bk = static_cast<std::uint64_t>(buf) * (kTileW >> 4);
        // 1. S and dP (rows: this warpgroup's queries; columns: the block's keys)
        float s[8][4], dp[8][4];
        ss_scores<true>(s, dp, dQk, dKk + bk, dOk, dVk + bk);
        // 2. dS·kDsScale, as the mma.sync dQ kernel forms it
        ds_rows<true>(s, dp, keys, rows, lse, dl, p.scaling, p.scaling * kDsScale);
        std::uint32_t a[4][4];
        mma16::to_afrag(a, s);
        // 3. dQ += dS·K
        rs_grads<false>(dq, a, dKn + bk, dq, a, 0);
      });
  // the tiles are free: the staged cos/sin rows, the column sums' scratch
  float* staged = reinterpret_cast<float*>(sQ + kStageOffset);
  issue_rope_rows(p, q0, rows, staged);
  float(&dq16)[16][4] = reinterpret_cast<float(&)[16][4]>(dq);
  mma16::scale_acc(dq16, 1.0f / kDsScale);
  staged_rows_landed();
  store_dq<HalfOut, true>(p, dq16, q0, rows, h, ld3, reinterpret_cast<float*>(sQ), staged);
}

template <bool HalfOut>
__global__ void __launch_bounds__(kThreads, 2) attn_dkv_wg(const AttnParams p) {
  dkv_wg<HalfOut>(p);
}
template <bool HalfOut>
__global__ void __launch_bounds__(kThreads, 2) attn_dq_wg(const AttnParams p) {
  dq_wg<HalfOut>(p);
}
// Both in one launch (ATTNBWD_CUDA_VARLEN_BWD=one, as attn_bwd_h): blockIdx.z 0 the dQ CTAs, 1 the dK/dV CTAs; the
// same inputs, disjoint outputs, so the two launches' bits.
template <bool HalfOut>
__global__ void __launch_bounds__(kThreads, 2) attn_bwd_wg(const AttnParams p) {
  if (blockIdx.z == 0) {
    dq_wg<HalfOut>(p);
  } else {
    dkv_wg<HalfOut>(p);
  }
}

// The wgmma forward's epilogue, once every warp is past its last product (the tiles are free): the block's dO rows
// staged for delta at the start of the tiles, then AO, lse and delta (forward_epilogue).
__device__ __forceinline__ void forward_wg_epilogue(const AttnParams& p, const float (&o16)[16][4],
                                                    const float (&m)[2], float (&l)[2], int64_t q0, int rows, int h,
                                                    const HalfCols& hc, std::uint8_t* tiles) {
  __half* staged = reinterpret_cast<__half*>(tiles);
  issue_do_rows(p, hc.dO, q0, rows, staged);
  staged_rows_landed();
  forward_epilogue<__half, true>(p, o16, m, l, q0, rows, h, hc.dO, p.AOh + static_cast<int64_t>(h) * kD, staged);
}

// Forward recompute: one warpgroup per (64-query block, head); Q resident, K and V streamed; S = Q·Kᵀ (SS), the
// mma.sync forward's online softmax step, O += P·V with P in registers and V N-major; its epilogue (AO in fp16,
// lse, delta).
__global__ void __launch_bounds__(kThreads, 2) attn_forward_wg(const AttnParams p) {
  Block b;
  if (!block_of(p, b)) return;
  const int64_t q0 = b.b0, ld3 = b.ld3;
  const int rows = b.n, h = b.h;
  const HalfCols hc = half_cols(p, h);
  extern __shared__ float4 smem4[];
  std::uint8_t* sQ = align_smem_1024(smem4);
  std::uint8_t* sK = sQ + kTileW;      // [2]
  std::uint8_t* sV = sK + 2 * kTileW;  // [2]

  issue_tile_sw(sQ, hc.q, ld3, q0, rows);  // committed with the first key block
  const std::uint64_t dQk = kmajor_desc(sQ), dKk = kmajor_desc(sK), dVn = nmajor_desc(sV);
  float o[2][8][4];
  mma16::zero(o[0]);
  mma16::zero(o[1]);
  float(&o16)[16][4] = reinterpret_cast<float(&)[16][4]>(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g, g + 8 (l: this thread's part)
  mma16::stream_blocks<kRows, true>(
      b.start, b.end,
      [&](int64_t k1, int keys1, int to) {
        issue_tile_sw(sK + to * kTileW, hc.k, ld3, k1, keys1);
        issue_tile_sw(sV + to * kTileW, hc.v, ld3, k1, keys1);
      },
      [&](int buf, int keys) {
        const std::uint64_t bk = static_cast<std::uint64_t>(buf) * (kTileW >> 4);
        float s[8][4];
        ss_scores<false>(s, s, dQk, dKk + bk, 0, 0);
        softmax_step<true>(s, keys, p.scaling, m, l, o16);  // P in s; O rescaled
        std::uint32_t a[4][4];
        mma16::to_afrag(a, s);
        rs_grads<false>(o, a, dVn + bk, o, a, 0);  // O += P·V
      });
  forward_wg_epilogue(p, o16, m, l, q0, rows, h, hc, sQ);
}

#else  // other passes of the fatbin: never launched there (the caller checks for an sm_90 device)

__global__ void attn_forward_wg(const AttnParams) {
  __trap();
}

template <bool HalfOut>
__global__ void attn_dkv_wg(const AttnParams) {
  __trap();
}
template <bool HalfOut>
__global__ void attn_dq_wg(const AttnParams) {
  __trap();
}
template <bool HalfOut>
__global__ void attn_bwd_wg(const AttnParams) {
  __trap();
}

#endif

}  // namespace

void attention_backward_dkv_sm90(const AttnParams& p, cudaStream_t stream) {
  if (p.dqkvh != nullptr) return launch(attn_dkv_wg<true>, kSmemDkvWg, p, stream);
  launch(attn_dkv_wg<false>, kSmemDkvWg, p, stream);
}

void attention_forward_sm90(const AttnParams& p, cudaStream_t stream) {
  launch(attn_forward_wg, kSmemFwdWg, p, stream);
}

void attention_backward_dq_sm90(const AttnParams& p, cudaStream_t stream) {
  if (p.dqkvh != nullptr) return launch(attn_dq_wg<true>, kSmemDkvWg, p, stream);
  launch(attn_dq_wg<false>, kSmemDkvWg, p, stream);
}

void attention_backward_one_sm90(const AttnParams& p, cudaStream_t stream) {
  if (p.dqkvh != nullptr) return launch(attn_bwd_wg<true>, kSmemDkvWg, p, stream, 2);
  launch(attn_bwd_wg<false>, kSmemDkvWg, p, stream, 2);
}

}  // namespace attnbwd::cuda::varlen
