// vision_mha_norm_backward's attention backward on sm_90a wgmma (Default, head_dim 64;
// ATTNBWD_CUDA_MHA_ATTN=wgmma, off by default until measured). The same two kernels and the same math as
// the mma.sync ones (vision_mha_norm_backward_attn.cu: query-major dQ and δ, key-major dK/dV, P read once
// by each), with the products issued by the CTA's one warpgroup as wgmma m64n64k16 (fp16 operands, fp32
// accumulators) instead of per-warp mma.sync + ldmatrix:
//  - fp16 tiles (64 rows of 64 halves = 128 B) sit in shared memory in the 128-byte-swizzled layout that
//    wgmma's descriptors read (16-byte chunk c of row r at chunk c ^ (r % 8), 1024-byte aligned tiles),
//    filled by cp.async; a tile serves as a K-major operand (rows = M or N, the 64 columns = K) or, with
//    the transpose bit, as an N-major B (rows = K);
//  - the products whose A operand is P, P⊙dP or dS take it from registers (the accumulator layout packs
//    into the A fragment, mma16::to_afrag), so P and dS never go back to shared memory;
//  - each group of wgmma is committed and waited for before its accumulators are read.
// The warpgroup's accumulators are the mma.sync C layout of each warp's 16 rows, so the P reads, the
// softmax-backward element math and the epilogue (attn::store_part) are the mma.sync kernels' own.
#include <cuda_fp16.h>

#include <cstdint>

#include "check.hpp"
#include "mma_fp16.cuh"
#include "sm90/ptx.cuh"
#include "vision_mha_norm_backward_attn.cuh"
#include "vision_mha_norm_backward_attn_parts.cuh"

namespace attnbwd::cuda::mha {
namespace {

using namespace attn;  // the parts shared with the mma.sync kernels

constexpr int kTileBytes = kRows * kD * 2;  // one swizzled fp16 tile: 8 KB
// Shared memory of a kernel streaming its blocks through `stages` buffers: fp16 tiles first (1024-byte
// aligned; one fixed tile + two per stage), then the fp32 P tiles and δ; +1 KB to align. With 3 stages
// 107-109 KB: two CTAs per SM still fit (the registers allow two).
constexpr std::size_t smem_dq(int stages) {
  return static_cast<std::size_t>(1 + 2 * stages) * kTileBytes + sizeof(float) * stages * kTileP + 1024;
}
// With δ read from global memory instead (occ3: 2 stages, 3 CTAs per SM) the dK/dV kernel needs exactly
// the dQ kernel's 75 KB: 3 × (75 + 1 reserved) KB = the SM's 228 KB.
constexpr std::size_t smem_dkv(int stages, bool delta_in_smem = true) {
  return static_cast<std::size_t>(1 + 2 * stages) * kTileBytes +
         sizeof(float) * stages * (kTileP + (delta_in_smem ? kRows : 0)) + 1024;
}

#if defined(ATTNBWD_SM90_DEVICE)

using mma16::to_afrag;
using namespace sm90;

// Issues the copy of rows [row0, row0 + rows) × 64 halves (row stride ldg halves, 16-byte aligned rows)
// into a swizzled tile; rows ≥ rows are zero-filled. The caller commits and waits.
__device__ __forceinline__ void issue_sw(std::uint8_t* s, const __half* __restrict__ g, int64_t ldg, int64_t row0,
                                         int rows) {
#pragma unroll
  for (int u = 0; u < kRows * 8 / kThreads; ++u) {
    const int i = threadIdx.x + u * kThreads, r = i >> 3, c = i & 7;
    const bool valid = r < rows;
    mma16::cp_async16(s + r * 128 + ((c ^ (r & 7)) << 4), g + (row0 + (valid ? r : 0)) * ldg + c * 8, valid);
  }
}

// issue_sw's contract with the thread's row and chunk fixed (row r = threadIdx/8 + 16u, chunk c =
// threadIdx % 8; the swizzle c ^ (r % 8) is the same for every u): one 64-bit row address per tile and a
// constant step, instead of a select and a 64-bit multiply per chunk. ATTNBWD_CUDA_MHA_COPY=rows|trows.
__device__ __forceinline__ void issue_sw_rows(std::uint8_t* s, const __half* __restrict__ g, int64_t ldg,
                                              int64_t row0, int rows) {
  constexpr int kPasses = kRows * 8 / kThreads, kRowsPerPass = kThreads / 8;  // 4 passes of 16 rows
  const int r = static_cast<int>(threadIdx.x) >> 3, c = static_cast<int>(threadIdx.x) & 7;
  const __half* first = g + row0 * ldg + c * 8;  // the block's first row: a valid address for empty copies
  const __half* src = first + r * ldg;
  std::uint8_t* dst = s + r * 128 + ((c ^ (r & 7)) << 4);
#pragma unroll
  for (int u = 0; u < kPasses; ++u) {
    const bool valid = r + u * kRowsPerPass < rows;
    mma16::cp_async16(dst + u * kRowsPerPass * 128, valid ? src + u * kRowsPerPass * ldg : first, valid);
  }
}

// The copy scheme of the kernels (ATTNBWD_CUDA_MHA_COPY): bit 0 — P tiles by issue_p_rows instead of
// issue_p; bit 1 — the fp16 tiles by issue_sw_rows instead of issue_sw. 0 is the measured default.
template <int kCopy>
__device__ __forceinline__ void issue_p_tile(float* s, const float* __restrict__ Pbh, const float* p_begin,
                                             const float* p_end, int64_t S, int64_t r0, int rows, int64_t c0,
                                             int cols) {
  if constexpr ((kCopy & 1) != 0)
    issue_p_rows(s, Pbh, p_begin, p_end, S, r0, rows, c0, cols);
  else
    issue_p(s, Pbh, p_begin, p_end, S, r0, rows, c0, cols);
}
template <int kCopy>
__device__ __forceinline__ void issue_tile(std::uint8_t* s, const __half* __restrict__ g, int64_t ldg, int64_t row0,
                                           int rows) {
  if constexpr ((kCopy & 2) != 0)
    issue_sw_rows(s, g, ldg, row0, rows);
  else
    issue_sw(s, g, ldg, row0, rows);
}

// Descriptors of a swizzled tile: K-major (k step kk: 16 columns = 32 bytes along the row) and N-major
// (k step kk: 16 rows = 2048 bytes; one 64-wide N chunk, so the leading offset is never used).
__device__ __forceinline__ std::uint64_t kmajor(const std::uint8_t* tile, int kk) {
  return smem_desc(smem_addr(tile) + 32 * kk, 16, 1024);
}
__device__ __forceinline__ std::uint64_t nmajor(const std::uint8_t* tile, int kk) {
  return smem_desc(smem_addr(tile) + 2048 * kk, kTileBytes, 1024);
}

// Keeps A fragments live until this point: wgmma reads its register operands asynchronously, so their
// registers must not be reused before the wgmma_wait that covers them.
__device__ __forceinline__ void fence_afrag(std::uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[k][i])::"memory");
}

// c0 += a0·B0 then c1 += a1·B1 (k = 64 each: A from registers, B an N-major swizzled tile), issued as one
// group and waited for; the accumulators and A fragments are fenced around the asynchronous products.
__device__ __forceinline__ void rs_products(float (&c0)[8][4], std::uint32_t (&a0)[4][4], const std::uint8_t* b0,
                                            float (&c1)[8][4], std::uint32_t (&a1)[4][4], const std::uint8_t* b1) {
  fence_acc(c1);
  fence_acc(c0);
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) wgmma_m64n64k16_f16_rs<1>(c0, a0[kc], nmajor(b0, kc), 1);
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) wgmma_m64n64k16_f16_rs<1>(c1, a1[kc], nmajor(b1, kc), 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_afrag(a0);
  fence_afrag(a1);
  fence_acc(c1);
  fence_acc(c0);
}

// Split blocks (kSplit = 2): the rows [begin, end) of the other sequence that half `half` of a block streams:
// the first ⌈n/2⌉ blocks, or the rest.
__device__ __forceinline__ void split_range(int64_t S, int kSplit, int half, int64_t& begin, int64_t& end) {
  const int64_t mid = (attn_blocks(S) + 1) / 2 * kRows;
  begin = kSplit == 1 || half == 0 ? 0 : mid;
  end = kSplit == 1 || half == 1 ? S : (mid < S ? mid : S);
}

// The two halves of a split block meet: each publishes its partial sums (a, b: accumulators in the C layout,
// e: row sums), the first to arrive leaves (false), the second adds the first's into its own (a + b is the
// same in fp32 in either order, so the result does not depend on which arrives last) and returns true.
// ws: the block's kSplitBlockFloats floats; count: its arrival counter (left zero); flag: a word
// of shared memory no thread touches until this returns. Every thread of the CTA calls it.
template <int NE>
__device__ __forceinline__ bool combine_halves(float* ws, unsigned* count, unsigned* flag, int half,
                                               float (&a)[8][4], float (&b)[8][4], float (&e)[NE]) {
  static_assert(64 + NE <= kSplitFloats && kSplitBlockFloats == 2 * kSplitFloats * kThreads, "split workspace");
  float* mine = ws + static_cast<std::size_t>(half) * kSplitFloats * kThreads + threadIdx.x;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      __stcg(mine + (4 * j + r) * kThreads, a[j][r]);
      __stcg(mine + (32 + 4 * j + r) * kThreads, b[j][r]);
    }
#pragma unroll
  for (int i = 0; i < NE; ++i) __stcg(mine + (64 + i) * kThreads, e[i]);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(count, 1u);
  __syncthreads();
  if (*flag == 0) return false;
  __threadfence();
  const float* other = ws + static_cast<std::size_t>(1 - half) * kSplitFloats * kThreads + threadIdx.x;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      a[j][r] += __ldcg(other + (4 * j + r) * kThreads);
      b[j][r] += __ldcg(other + (32 + 4 * j + r) * kThreads);
    }
#pragma unroll
  for (int i = 0; i < NE; ++i) e[i] += __ldcg(other + (64 + i) * kThreads);
  if (threadIdx.x == 0) *count = 0;
  return true;
}

// kMinBlocks: CTAs per SM the registers must allow (2; 3 with 2 stages: 168 registers, no spills).
// kSplit: CTAs per block (2: each streams half of the keys, combine_halves).
template <int kStages, int kCopy, int kMinBlocks, int kSplit>
__global__ void __launch_bounds__(kThreads, kMinBlocks) attn_dq_wg(const AttnParams p) {
  const int half = static_cast<int>(blockIdx.x % kSplit);
  const int64_t block = blockIdx.x / kSplit;
  const Cta c = cta_of(p, block);
  const int64_t S = p.S, E = static_cast<int64_t>(p.H) * kD;
  extern __shared__ float4 smem4[];
  std::uint8_t* sdO = align_smem_1024(smem4);  // this block's dO
  std::uint8_t* sK = sdO + kTileBytes;            // [kStages]
  std::uint8_t* sV = sK + kStages * kTileBytes;   // [kStages]
  float* sP = reinterpret_cast<float*>(sV + kStages * kTileBytes);  // [kStages] P tiles (rows: queries)
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float* Pbh = p.P + c.bh * S * S;
  const __half* K = p.k + c.bh * S * kD;
  const __half* V = p.v + c.bh * S * kD;
  const float* p_begin = p.P;
  const float* p_end = p.P + p.B * p.H * S * S;
  const int sh_lo = row_shift(Pbh, (c.r0 + w * 16 + g) * S), sh_hi = row_shift(Pbh, (c.r0 + w * 16 + g + 8) * S);

  issue_tile<kCopy>(sdO, p.dO + c.b * S * E + static_cast<int64_t>(c.h) * kD, E, c.r0, c.rows);  // with the first block
  float x[8][4], y[8][4];
  mma16::zero(x);
  mma16::zero(y);
  float dsum[2] = {0.0f, 0.0f};
  int64_t k_begin, k_end;
  split_range(S, kSplit, half, k_begin, k_end);
  mma16::stream_blocks_deep<kRows, kStages, true>(
      k_begin, k_end,
      [&](int64_t k1, int keys1, int to) {
        issue_p_tile<kCopy>(sP + to * kTileP, Pbh, p_begin, p_end, S, c.r0, c.rows, k1, keys1);
        issue_tile<kCopy>(sK + to * kTileBytes, K, kD, k1, keys1);
        issue_tile<kCopy>(sV + to * kTileBytes, V, kD, k1, keys1);
      },
      [&](int buf, int) {
        const std::uint8_t* cK = sK + buf * kTileBytes;
        const std::uint8_t* cV = sV + buf * kTileBytes;
        float dp[8][4];
        mma16::zero(dp);  // overwritten by the first product (accumulate 0); zeroed so it is never read undefined
        fence_acc(dp);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_f16_ss<0>(dp, kmajor(sdO, kk), kmajor(cV, kk), kk);
        wgmma_commit();
        // this lane's P values while the product runs
        const float* cP_lo = sP + buf * kTileP + (w * 16 + g) * kLdP + sh_lo + 2 * t;
        const float* cP_hi = sP + buf * kTileP + (w * 16 + g + 8) * kLdP + sh_hi + 2 * t;
        float pr[8][4];
        load_p(cP_lo, cP_hi, pr);
        wgmma_wait<0>();
        fence_acc(dp);
        p_and_w(pr, dp, dsum);
        std::uint32_t ap[4][4], aw[4][4];
        to_afrag(ap, pr);
        to_afrag(aw, dp);
        rs_products(y, ap, cK, x, aw, cK);
      });
  if constexpr (kSplit == 2) {  // the P tiles are free (stream_blocks_deep ended with a barrier)
    if (!combine_halves(p.split_ws + block * kSplitBlockFloats, p.split_count + block,
                        reinterpret_cast<unsigned*>(sP + kTileP), half, x, y, dsum))
      return;
  }
  finish_dq(p, c, dsum, x, y);
  store_part(p, x, c, 0, sP);  // stream_blocks_deep ended with a barrier: the P tiles are free
}

template <int kStages, int kCopy, int kMinBlocks, int kSplit>
__global__ void __launch_bounds__(kThreads, kMinBlocks) attn_dkv_wg(const AttnParams p) {
  constexpr bool kDeltaInSmem = kMinBlocks < 3;  // at 3 CTAs per SM the 512 bytes of δ tiles do not fit
  const int half = static_cast<int>(blockIdx.x % kSplit);
  const int64_t block = blockIdx.x / kSplit;
  const Cta c = cta_of(p, block);
  const int64_t S = p.S, E = static_cast<int64_t>(p.H) * kD;
  extern __shared__ float4 smem4[];
  std::uint8_t* sV = align_smem_1024(smem4);  // this block's V
  std::uint8_t* sQ = sV + kTileBytes;               // [kStages]
  std::uint8_t* sdO = sQ + kStages * kTileBytes;    // [kStages]
  float* sP = reinterpret_cast<float*>(sdO + kStages * kTileBytes);  // [kStages] P tiles (rows: queries)
  float* sDl = sP + kStages * kTileP;                                  // [kStages][64] δ of the query block
  const int t = threadIdx.x & 3;
  const float* Pbh = p.P + c.bh * S * S;
  const __half* Q = p.q + c.bh * S * kD;
  const __half* dO = p.dO + c.b * S * E + static_cast<int64_t>(c.h) * kD;
  const float* delta = p.delta + c.bh * S;
  const float* p_begin = p.P;
  const float* p_end = p.P + p.B * p.H * S * S;
  int64_t q_begin, q_end;
  split_range(S, kSplit, half, q_begin, q_end);
  int64_t q_at = q_begin;  // first query of the block the body is on

  issue_tile<kCopy>(sV, p.v + c.bh * S * kD, kD, c.r0, c.rows);  // with the first block
  float dk[8][4], dv[8][4];
  mma16::zero(dk);
  mma16::zero(dv);
  mma16::stream_blocks_deep<kRows, kStages, true>(
      q_begin, q_end,
      [&](int64_t q1, int qrows1, int to) {
        issue_p_tile<kCopy>(sP + to * kTileP, Pbh, p_begin, p_end, S, q1, qrows1, c.r0, c.rows);
        issue_tile<kCopy>(sQ + to * kTileBytes, Q, kD, q1, qrows1);
        issue_tile<kCopy>(sdO + to * kTileBytes, dO, E, q1, qrows1);
        if (kDeltaInSmem && threadIdx.x < kRows) {
          const bool valid = static_cast<int>(threadIdx.x) < qrows1;
          cp_async4(sDl + to * kRows + threadIdx.x, valid ? delta + q1 + threadIdx.x : delta, valid);
        }
      },
      [&](int buf, int) {
        const float* cP = sP + buf * kTileP;
        const std::uint8_t* cQ = sQ + buf * kTileBytes;
        const std::uint8_t* cdO = sdO + buf * kTileBytes;
        const float* cDl = sDl + buf * kRows;
        const int sh0 = row_shift(Pbh, (q_at + 2 * t) * S + c.r0), sh1 = row_shift(Pbh, (q_at + 2 * t + 1) * S + c.r0);
        float dl[8][2];  // δ of this lane's query columns, from global memory (cached) when not in smem
        if constexpr (!kDeltaInSmem) {
#pragma unroll
          for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int64_t q = q_at + j * 8 + 2 * t + e;
              dl[j][e] = q < S ? __ldg(delta + q) : 0.0f;  // past S: P is zero there, δ unused
            }
        }
        q_at += kRows;
        // Transposed: rows are the block's 64 keys (this warp: 16), columns the 64 queries.
        float dpt[8][4];
        mma16::zero(dpt);
        fence_acc(dpt);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_f16_ss<0>(dpt, kmajor(sV, kk), kmajor(cdO, kk), kk);
        wgmma_commit();
        float pt[8][4];
        p_transposed(cP, sh0, sh1, pt);
        std::uint32_t ap[4][4], as[4][4];
        to_afrag(ap, pt);
        wgmma_wait<0>();
        fence_acc(dpt);
        if constexpr (kDeltaInSmem)
          ds_transposed(pt, dpt, cDl);
        else
          ds_transposed(pt, dpt, dl);
        to_afrag(as, dpt);
        rs_products(dv, ap, cdO, dk, as, cQ);
      });
  if constexpr (kSplit == 2) {  // the P tiles are free (stream_blocks_deep ended with a barrier)
    float none[1] = {0.0f};
    const int64_t blocks = attn_blocks(S) * p.B * p.H;
    if (!combine_halves(p.split_ws + block * kSplitBlockFloats, p.split_count + blocks + block,
                        reinterpret_cast<unsigned*>(sP + kTileP), half, dk, dv, none))
      return;
  }
  mma16::scale_acc(dk, p.scale / kDsScale);
  store_part(p, dk, c, 1, sP);
  store_part(p, dv, c, 2, sP + 4 * kD);
}

#else  // other passes of the fatbin: never launched there (the caller runs these on sm_90 devices only)

template <int kStages, int kCopy, int kMinBlocks, int kSplit>
__global__ void attn_dq_wg(const AttnParams) { __trap(); }
template <int kStages, int kCopy, int kMinBlocks, int kSplit>
__global__ void attn_dkv_wg(const AttnParams) { __trap(); }

#endif

}  // namespace

namespace {
template <int kStages, int kCopy, int kMinBlocks = 2, int kSplit = 1>
void launch_sm90(const AttnParams& p, cudaStream_t stream) {
  launch(attn_dq_wg<kStages, kCopy, kMinBlocks, kSplit>, smem_dq(kStages), p, stream, kSplit);
  launch(attn_dkv_wg<kStages, kCopy, kMinBlocks, kSplit>, smem_dkv(kStages, kMinBlocks < 3), p, stream, kSplit);
}
}  // namespace

void attention_backward_sm90(const AttnParams& p, int stages, int min_blocks, int copy, int split,
                             cudaStream_t stream) {
  if (split == 2) {
    if (!p.split_ws || !p.split_count) fail("attention_backward_sm90", __FILE__, __LINE__, "split without workspace");
    if (stages == 2 && min_blocks == 3 && copy == 0) return launch_sm90<2, 0, 3, 2>(p, stream);
    if (stages == 3 && min_blocks == 2 && copy == 0) return launch_sm90<3, 0, 2, 2>(p, stream);
    fail("attention_backward_sm90", __FILE__, __LINE__, "split 2 is built for occ3 and serial3 with copy 0");
  }
  if (stages == 2 && min_blocks == 3) return launch_sm90<2, 0, 3>(p, stream);
  if (stages == 2) return launch_sm90<2, 0>(p, stream);  // the copy variants are built for 3 stages
  switch (copy) {
    case 1: return launch_sm90<3, 1>(p, stream);
    case 2: return launch_sm90<3, 2>(p, stream);
    case 3: return launch_sm90<3, 3>(p, stream);
    default: return launch_sm90<3, 0>(p, stream);
  }
}

}  // namespace attnbwd::cuda::mha
