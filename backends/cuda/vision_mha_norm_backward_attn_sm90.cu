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

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "check.hpp"
#include "linear_backward_sm90.hpp"
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

// ---- warp-specialised form (ATTNBWD_CUDA_MHA_WGMMA=ws|wstma|wscp|wstmaw) ------------------------------------------
// The same two kernels, products and order as attn_dq_wg / attn_dkv_wg (serial, unsplit: the same bits), with
// one CTA of three warpgroups per 128 rows (two 64-row blocks of one head). The first warpgroup is the producer:
// it issues every copy of a stage onto the stage's full mbarrier — thread 0 the K/V or Q/dO tiles by TMA from 3-D
// maps that zero-fill rows past S, δ by one bulk copy, and P's tile either by TMA through a view of P as rows of
// 4·S floats (kTmaP, issue_p_view: four boxes per tile) or as 16-byte cp.async chunks from all 128 threads, each
// followed by a cp.async arrival (issue_p_ws). Either way a P row's 64 or 128 floats sit at their 16-byte phase
// in rows of kLdP / kLdP2 floats, as in the serial kernels. (A first form with one bulk copy per P row ran
// 1.4-2.7x slower than the serial kernels: small bulk copies are costly per request.) The two consumer
// warpgroups each own one 64-row block and release a stage by one arrival per warp on its empty mbarrier, with
// no CTA barrier in the loop, so one warpgroup's element math overlaps the other's products and no consumer
// instruction is spent on copies. P must be 16-byte aligned with B·H·S a multiple of 4
// (attention_ws_unsupported): the view's rows, and every aligned chunk, lie inside P.
namespace ws {
constexpr int kThreads3 = 3 * kThreads;               // producer warpgroup + two consumers
constexpr int kLdP2 = 2 * kRows + 4;                  // dK/dV kernel: P rows of 128 keys (+ phase), 528 bytes
constexpr int kStageBytes = 51200;                    // one stage, a multiple of 1024 (tiles stay aligned)
constexpr int kStageBytesWide = 52224;                // the dK/dV kernel's stage with P by TMA (rows of kLdPV2)
constexpr int kOffStages = 2 * kTileBytes;            // after the two resident tiles (dO or V, one per consumer)
// P by TMA through a view of P as rows of 4·S floats (issue_p_view): per stage four boxes (slots) of rows of kLdP
// (dQ kernel: 32 rows) or kLdPV2 floats (dK/dV kernel: 16 rows). kLdPV2 = 136, not 132: with 132 the transposed
// reads of a warp hit each bank 4 times per load, with 136 twice, as the cp.async rows of 132 do (a model of the
// lane addresses, perf/NOTES.md eleventh session).
constexpr int kLdPV2 = 2 * kRows + 8;
// The dQ kernel's view rows of kLdP = 68 floats put a warp's loads of P 4 ways on each bank (its 8 row groups fall
// in 4 slots whose boxes start on the same bank, the model above); rows of kLdPQ = 72 floats make that 2 ways, as
// the cp.async rows are. The stage grows to 52 KB: 4 of them fit only with the column-sum scratch moved into the
// consumer's own dO tile, free once its loop is done (kRedInTile). ATTNBWD_CUDA_MHA_WGMMA=wstmaw.
constexpr int kLdPQ = kLdP + 4;
constexpr int kViewRowsQ = 2 * kRows / 4, kViewRowsK = kRows / 4;
constexpr int kViewBoxQ = kViewRowsQ * kLdP * 4, kViewBoxK = kViewRowsK * kLdPV2 * 4;  // 8704 bytes each
static_assert(kViewBoxQ % 128 == 0 && kViewBoxK % 128 == 0, "TMA boxes 128-byte aligned in shared memory");
// dQ stage: K | V | P [128][kLdP]; dK/dV stage: Q | dO | P [64][kLdP2] | δ [64]
static_assert(2 * kTileBytes + 2 * kRows * kLdP * 4 <= kStageBytes, "dQ stage");
static_assert(2 * kTileBytes + kRows * kLdP2 * 4 + kRows * 4 <= kStageBytes, "dK/dV stage");
static_assert(2 * kTileBytes + 4 * kViewBoxK + kRows * 4 <= kStageBytesWide, "dK/dV stage, P by TMA");
constexpr int kStageBytesQ = 2 * kTileBytes + 4 * kViewRowsQ * kLdPQ * 4;  // 53248: the dQ stage with rows of kLdPQ
static_assert(kStageBytesQ % 1024 == 0 && (kViewRowsQ * kLdPQ * 4) % 128 == 0, "dQ wide stage and boxes aligned");
// 2 KB of column-sum scratch per consumer after the stages (red_bytes 0: none, kRedInTile), then the barriers
constexpr int kRedBytes = 2 * 2048;
__host__ __device__ constexpr int off_red(int stages, int stage_bytes = kStageBytes) {
  return kOffStages + stages * stage_bytes;
}
__host__ __device__ constexpr int off_bar(int stages, int stage_bytes = kStageBytes, int red_bytes = kRedBytes) {
  return off_red(stages, stage_bytes) + red_bytes;
}
constexpr std::size_t smem(int stages, int stage_bytes = kStageBytes, int red_bytes = kRedBytes) {
  return static_cast<std::size_t>(off_bar(stages, stage_bytes, red_bytes)) + (2 * stages + 1) * 8 + 1024;
}
static_assert(smem(4, kStageBytesQ, 0) <= 232448, "four wide dQ stages fit the SM's 227 KB");
// P's boxes trimmed to what lies inside S (AttnParams::trim_p, ATTNBWD_CUDA_MHA_PTRIM): the dQ kernel's narrow last
// key block in boxes kLdN floats wide (its ≤ 3-float phase and 16 columns; slots of kViewRowsQ rows of kLdN floats),
// the dQ work of a head's last ≤ 68 rows in boxes of kTrimRowsQ view rows (the same slots, rows past 4·kTrimRowsQ not
// copied), and the dK/dV kernel's narrow last query block in boxes of kTrimRowsK view rows (16 queries).
constexpr int kLdN = 20, kTrimRowsQ = 17, kTrimRowsK = 4;
// AttnParams::trim_p == 2 (ATTNBWD_CUDA_MHA_PTRIM=cols) also cuts the dK/dV kernel's boxes to kLdK floats where the
// CTA's keys inside S fit with any phase (≤ kLdK − 3 of them: the head's last CTA at S = 577 holds 65): its slots then
// hold rows of kLdK floats. kLdK ≡ kLdPV2 (mod 32), so each lane's shared-memory banks stay those of the full rows.
constexpr int kLdK = 72;
static_assert(kLdK % 32 == kLdPV2 % 32 && (kViewRowsK * kLdK * 4) % 128 == 0, "cut dK/dV slots: banks, alignment");
static_assert((kViewRowsQ * kLdN * 4) % 128 == 0, "narrow slots 128-byte aligned in shared memory");
}  // namespace ws

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
// (k step kk: 16 rows = 2048 bytes; one 64-wide N chunk, so the leading offset is never used). The step is added
// to the encoded descriptor (its address field holds bytes / 16; a shared address + 3 · 2048 stays below 2^18, so
// the field never carries): the tile's descriptor is formed once for the four steps. Forming it per step, with
// the 18-bit mask of every address, cost ~70 uniform-datapath and integer instructions per block and warp in
// the ws kernels (ncu on #8, twelfth session: ULOP3, UIADD3, UMOV, USHF, R2UR 18 % of the dQ kernel's).
__device__ __forceinline__ std::uint64_t kmajor(const std::uint8_t* tile, int kk) {
  return smem_desc(smem_addr(tile), 16, 1024) + static_cast<std::uint64_t>(2 * kk);
}
__device__ __forceinline__ std::uint64_t nmajor(const std::uint8_t* tile, int kk) {
  return smem_desc(smem_addr(tile), kTileBytes, 1024) + static_cast<std::uint64_t>(128 * kk);
}

// Keeps A fragments live until this point: wgmma reads its register operands asynchronously, so their
// registers must not be reused before the wgmma_wait that covers them.
__device__ __forceinline__ void fence_afrag(std::uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[k][i])::"memory");
}

// This warp's 16 rows of a swizzled 64 × 64 fp16 tile (K-major: its 64 columns are k) as the A fragments of four
// wgmma k steps (to_afrag's layout), by ldmatrix: lanes 0-15 address rows 16w + lane at chunk 2kc, lanes 16-31 the
// same rows at chunk 2kc + 1 (chunk c of row r sits at c ^ (r % 8)).
__device__ __forceinline__ void afrag_of_tile(std::uint32_t (&a)[4][4], const std::uint8_t* tile, int w, int lane) {
  const int r = w * 16 + (lane & 15);
  const std::uint32_t row = smem_addr(tile) + r * 128;
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) mma16::ldsm4(a[kc], row + (((2 * kc + (lane >> 4)) ^ (r & 7)) << 4));
}

// d ← a through one PRMT per register (an identity byte permutation). The ws kernels keep the resident tile's A
// fragments for the whole loop and give each block's wgmma a fresh copy: with the loop-invariant registers as the
// wgmma operand itself, ptxas (CUDA 13.0) allocated the next products' A fragments over them inside the loop, so
// from the second block on the products read the wrong values (H200, thirteenth session: perf/NOTES.md). A plain
// `mov` is folded away by ptxas and fails the same way; the PRMT stays (its SASS was read back).
__device__ __forceinline__ void afrag_copy(std::uint32_t (&d)[4][4], const std::uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("prmt.b32 %0, %1, 0, 0x3210;" : "=r"(d[k][i]) : "r"(a[k][i]));
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

// ---- warp-specialised form: the kernels (see above) ----
namespace ws {

// attn::store_part for a consumer warpgroup (ct: the thread's index inside it; its column sums meet at named
// barrier 1 + wgi instead of the CTA's barrier).
__device__ __forceinline__ void store_part_wg(const AttnParams& p, const float (&acc)[8][4], const Cta& c, int part,
                                              float* red, int ct, int wgi) {
  float cs[8][2];
  float* out = store_rows(p, acc, c, part, ct / 32, ct & 31, cs);
  mma16::column_sums_128(cs, red, out, ct, [&] { named_barrier(1 + wgi, kThreads); });
}

// The stage barriers at the end of the shared memory: full[kStages], empty[kStages], then one more (the resident
// tiles' barrier). Thread 0 initialises them (full: full_count arrivals; empty: one per warp of the nact
// consumer warpgroups; the last: 1); the caller's __syncthreads makes them visible.
template <int kStages, int kStageB = kStageBytes, int kRedB = kRedBytes>
struct Bars {
  std::uint64_t *full, *empty, *tiles;
  __device__ __forceinline__ Bars(std::uint8_t* base, unsigned full_count, int nact)
      : full(reinterpret_cast<std::uint64_t*>(base + off_bar(kStages, kStageB, kRedB))),
        empty(full + kStages),
        tiles(empty + kStages) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < kStages; ++s) {
        mbar_init(&full[s], full_count);
        mbar_init(&empty[s], 4 * nact);
      }
      mbar_init(tiles, 1);
      mbar_init_fence();
    }
  }
};

// attn::finish_dq for a consumer warpgroup, with δ·kDsScale at its padded row (rows past S get 0: the dK/dV kernel
// reads whole 64-row blocks), then the epilogue.
__device__ __forceinline__ void finish_dq_wg(const AttnParams& p, const Cta& c, float (&dsum)[2], float (&x)[8][4],
                                             const float (&y)[8][4], float* red, int ct, int wgi) {
  const int w = ct / 32, lane = ct & 31, g = lane >> 2, t = lane & 3;
  quad_sums(dsum);
  const int lo = w * 16 + g;
  if (t == 0) {
    float* d = p.delta + c.bh * p.delta_ld + c.r0;
    d[lo] = lo < c.rows ? dsum[0] : 0.0f;
    d[lo + 8] = lo + 8 < c.rows ? dsum[1] : 0.0f;
  }
  dq_from_sums(dsum, x, y, p.scale);
  store_part_wg(p, x, c, 0, red, ct, wgi);
}

// Zeroes this lane's accumulator-layout values (J 8-column chunks) whose column (8j + 2t + e) is n or past it, where
// n < 64: the sequence's last block, whose columns past S were not copied (stale or never-written shared memory).
template <int J>
__device__ __forceinline__ void zero_past(float (&v)[J][4], int t, int n) {
  if (n < kRows) {
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (j * 8 + 2 * t + (r & 1) >= n) v[j][r] = 0.0f;
  }
}

// ---- the narrow last block (AttnParams::narrow_tail, ATTNBWD_CUDA_MHA_TAIL=narrow) ----
// Where the streamed sequence's last block holds at most kNarrow rows inside S (S = 577: one), its products shrink to
// those 16: dP on 16 columns (m64n16k16) and one k step of each accumulating product, with the element math on the
// lane's 8 values of the 16 columns. The full block's other 48 columns are past S (zero P, V or dO, K or Q rows):
// there the full block adds exact zeros to the accumulators and the row sums, so the narrow block gives its bits.
constexpr int kNarrow = 16;
__device__ __forceinline__ bool narrow_block(const AttnParams& p, int64_t row0) {
  return p.narrow_tail != 0 && p.S - row0 <= kNarrow;
}
// to_afrag's first k step (columns 0..15) of a 16-column accumulator
__device__ __forceinline__ void to_afrag16(std::uint32_t (&a)[4], const float (&s)[2][4]) {
  a[0] = mma16::half2_bits(s[0][0], s[0][1]);
  a[1] = mma16::half2_bits(s[0][2], s[0][3]);
  a[2] = mma16::half2_bits(s[1][0], s[1][1]);
  a[3] = mma16::half2_bits(s[1][2], s[1][3]);
}
__device__ __forceinline__ void fence_afrag16(std::uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
}
// dp ← a·Bᵀ over k = 0..63 on 16 columns (B: the first 16 rows of a K-major swizzled tile), issued and committed
__device__ __forceinline__ void dp16_issue(float (&dp)[2][4], std::uint32_t (&a)[4][4], const std::uint8_t* b) {
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int r = 0; r < 4; ++r) dp[j][r] = 0.0f;
  fence_acc(dp);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) wgmma_m64n16k16_f16_rs(dp, a[kk], kmajor(b, kk), kk);
  wgmma_commit();
}
// rs_products' first k step alone: c0 += a0·B0[rows 0..15], c1 += a1·B1[rows 0..15], waited for
__device__ __forceinline__ void rs_products16(float (&c0)[8][4], std::uint32_t (&a0)[4], const std::uint8_t* b0,
                                              float (&c1)[8][4], std::uint32_t (&a1)[4], const std::uint8_t* b1) {
  fence_acc(c1);
  fence_acc(c0);
  wgmma_fence();
  wgmma_m64n64k16_f16_rs<1>(c0, a0, nmajor(b0, 0), 1);
  wgmma_m64n64k16_f16_rs<1>(c1, a1, nmajor(b1, 0), 1);
  wgmma_commit();
  wgmma_wait<0>();
  fence_afrag16(a0);
  fence_afrag16(a1);
  fence_acc(c1);
  fence_acc(c0);
}

// The 64-row block a consumer warpgroup owns: rows r0 = first + 64·wgi of head bh.
__device__ __forceinline__ Cta wg_block(const AttnParams& p, int64_t bh, int64_t first, int wgi) {
  Cta c;
  c.bh = bh;
  c.b = bh / p.H;
  c.h = static_cast<int>(bh - c.b * p.H);
  c.r0 = first + static_cast<int64_t>(kRows) * wgi;
  c.rows = static_cast<int>(p.S - c.r0 < kRows ? p.S - c.r0 : kRows);
  c.blk = c.r0 / kRows;
  return c;
}

// Producer warpgroup (128 threads, pt = its thread index): cp.async copies of P rows row0 + r (r < kRowsT; rows
// ≥ S skipped) × columns [c0, c0 + cols) into rows of kLd floats at s, each row's element 0 at its 16-byte phase
// (row_shift) as in attn::issue_p_rows: 8 threads per row, thread i copying chunks i, i + 8, ... of the row's
// ⌈(phase + cols)/4⌉ aligned 16-byte chunks (never past the last one holding a wanted element).
template <int kRowsT, int kLd>
__device__ __forceinline__ void issue_p_ws(float* s, const float* __restrict__ Pbh, int64_t S, int64_t row0, int64_t c0,
                                           int cols, int pt) {
  constexpr int kRowsPerPass = kThreads / 8, kMaxChunks = kLd / 4;
  const int i = pt & 7;
  int64_t row = row0 + (pt >> 3);
  float* dst = s + (pt >> 3) * kLd;
#pragma unroll 1
  for (int pass = 0; pass < kRowsT / kRowsPerPass; ++pass) {
    if (row < S) {
      const int64_t at = row * S + c0;
      const int sh = row_shift(Pbh, at);
      const float* src = Pbh + at - sh;
      const int need = (sh + cols + 3) >> 2;
#pragma unroll
      for (int u = 0; u < (kMaxChunks + 7) / 8; ++u) {
        const int ch = i + 8 * u;
        if (ch < need) mma16::cp_async16(dst + 4 * ch, src + 4 * ch, true);
      }
    }
    row += kRowsPerPass;
    dst += kRowsPerPass * kLd;
  }
}

// Producer (one thread): the stage's P tile through mP, a map of P viewed as rows of 4·S floats, whose row stride is
// a multiple of 16 bytes where P's own (S floats) is not. The tile's rows R + i (R: the first row's index among
// P's B·H·S rows; i < 4·kRowsT) fall into four slots i % 4; a slot's rows are 4·S floats apart, i.e. consecutive
// view rows from (R + slot) / 4, at view column x = ((R + slot) % 4)·S + c0. A box starts at a 16-byte boundary
// (TMA refuses others), so slot s's box starts at x − phase(s) (view_phase) and is kLd floats wide: element (i, c)
// of the tile sits at slot·kRowsT·kLd + (i / 4)·kLd + phase(slot) + c, in boxes of kRowsT rows. Columns past the
// row's end come from the next row (or zeros past the view): the consumers mask them.
__device__ __forceinline__ int view_phase(int64_t R, int slot, int64_t S) {
  return static_cast<int>((((R + slot) & 3) * S) & 3);  // c0 is a multiple of 4
}
template <int kRowsT, int kLd>
__device__ __forceinline__ void issue_p_view(std::uint8_t* dst, const CUtensorMap* mP, std::uint64_t* bar, int64_t R,
                                             int64_t S, int64_t c0) {
#pragma unroll
  for (int slot = 0; slot < 4; ++slot) {
    const int64_t r = R + slot;
    const int x = static_cast<int>((r & 3) * S + c0) - view_phase(R, slot, S);
    tma_load_2d(dst + slot * kRowsT * kLd * 4, mP, bar, x, static_cast<int>(r >> 2));
  }
}

// Key-major (the ws dK/dV work): this lane's Pᵀ values — rows its warp's 16 keys (col0: its first key column in the
// stage's P tile), columns the block's first 8·J queries (query block at q1 of head bh) — by TMA (kTmaP: view rows of
// kLdPV2 floats in four slots, query 8j + 2t + e in slot 2(t & 1) + e at box row 2j + t / 2) or from the producer's
// cp.async rows of kLdP2 floats, each query's row at its own 16-byte phase (keys from K0).
template <bool kTmaP, int kLdV, int J>
__device__ __forceinline__ void load_pt_ws(float (&pt)[J][4], const float* cP, const float* Pbh, int64_t bh, int64_t S,
                                           int64_t q1, int64_t K0, int col0, int t) {
  if constexpr (kTmaP) {  // view rows of kLdV floats (kLdPV2, or kLdK in a CTA whose boxes are cut)
    const int64_t R = bh * S + q1;
    const float* q0 = cP + (2 * (t & 1)) * kViewRowsK * kLdV + (t >> 1) * kLdV + col0 + view_phase(R, 2 * (t & 1), S);
    const float* q1p =
        cP + (2 * (t & 1) + 1) * kViewRowsK * kLdV + (t >> 1) * kLdV + col0 + view_phase(R, 2 * (t & 1) + 1, S);
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) pt[j][r] = ((r & 1) ? q1p : q0)[2 * j * kLdV + 8 * (r >> 1)];
  } else {
    const int sh0 = row_shift(Pbh, (q1 + 2 * t) * S + K0), sh1 = row_shift(Pbh, (q1 + 2 * t + 1) * S + K0);
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        pt[j][r] = cP[(j * 8 + 2 * t + (r & 1)) * kLdP2 + ((r & 1) ? sh1 : sh0) + col0 + 8 * (r >> 1)];
  }
}

// Where P comes by TMA, thread 0 issues every copy and the producer warpgroup's other 127 threads return after
// setmaxnreg. They must not follow the stage barriers: nothing waits for them, so one of their warps could fall a
// whole ring of stages behind, and a parity wait on an empty barrier that has since completed two more phases never
// returns (the kernel then never ends): the likely cause of the fused launch's hangs at #4 in the fifty-fourth session
// (perf/NOTES.md). Where P comes by cp.async, all 128 threads copy P rows and arrive on each full barrier, so the
// consumers cannot pass them. (Thirteenth session: the exiting form measured the same times.)
// How the dK/dV work learns that δ is complete: it is (the dQ kernel ran before: kWaitNone), the dQ kernel's grid
// completing (programmatic dependent launch: kWaitGrid), or the head's counter in p.order reaching its 64-row query
// blocks (the fused launch: kWaitFlag; the dQ work publishes each block's δ with a release of that counter).
constexpr int kWaitNone = 0, kWaitGrid = 1, kWaitFlag = 2;

// The dQ work of rows [Q0, Q0 + 128) of head bh (a CTA of attn_dq_ws, or a dQ item of attn_fused_ws).
template <int kStages, bool kTmaP, int kLdQ, int kWait>
__device__ __forceinline__ void dq_ws_body(const CUtensorMap& mK, const CUtensorMap& mV, const CUtensorMap& mdO,
                                           const CUtensorMap& mP, const CUtensorMap& mPn, const CUtensorMap& mPr,
                                           const AttnParams& p, int64_t bh, int64_t Q0, std::uint8_t* base) {
  const int64_t S = p.S, nk = attn_blocks(S);
  const int nact = S - Q0 > kRows ? 2 : 1;  // consumer warpgroups with rows
  static_assert(kLdQ == kLdP || (kTmaP && kLdQ == kLdPQ), "wide view rows are built for P by TMA");
  constexpr bool kRedInTile = kLdQ != kLdP;  // the column-sum scratch in the consumer's dO tile after its loop
  constexpr int kSB = kRedInTile ? kStageBytesQ : kStageBytes;
  // full: thread 0's TMA arrival (+ every producer thread's cp.async arrival)
  const Bars<kStages, kSB, kRedInTile ? 0 : kRedBytes> bars(base, kTmaP ? 1 : kThreads + 1, nact);
  std::uint64_t *full = bars.full, *empty = bars.empty, *dobar = bars.tiles;
  __syncthreads();
  if constexpr (kWait == kWaitGrid) griddep_launch_dependents();  // the dK/dV kernel may start on SMs left free
  const float* Pbh = p.P + bh * S * S;
  const int b = static_cast<int>(bh / p.H), h = static_cast<int>(bh - static_cast<int64_t>(b) * p.H);

  if (threadIdx.x < kThreads) {  // producer warpgroup: thread 0 the TMA tiles, all 128 the P rows by cp.async
    setmaxnreg_dec<40>();
    const int pt = static_cast<int>(threadIdx.x);
    if (kTmaP && pt != 0) return;  // thread 0 issues every copy (above: the others must not follow the barriers)
    if (pt == 0) {
      mbar_arrive_expect_tx(dobar, nact * kTileBytes);
      for (int i = 0; i < nact; ++i)
        tma_load_3d(base + i * kTileBytes, &mdO, dobar, h * kD, static_cast<int>(Q0 + i * kRows), b);
    }
    int s = 0;
    std::uint32_t phase = 0;
    for (int64_t kb = 0; kb < nk; ++kb) {
      const int64_t k1 = kb * kRows;
      const int cols = static_cast<int>(S - k1 < kRows ? S - k1 : kRows);
      mbar_wait(&empty[s], phase ^ 1);
      std::uint8_t* st = base + kOffStages + s * kSB;
      if (pt == 0) {
        // trimmed boxes (p.trim_p): the narrow key block's 16 columns, or the head's last ≤ 68 rows
        const bool cut_cols = kTmaP && p.trim_p != 0 && narrow_block(p, k1);
        const bool cut_rows = kTmaP && p.trim_p != 0 && !cut_cols && S - Q0 <= 4 * kTrimRowsQ;
        const int pbytes = !kTmaP     ? 0
                           : cut_cols ? 4 * kViewRowsQ * kLdN * 4
                                      : 4 * (cut_rows ? kTrimRowsQ : kViewRowsQ) * kLdQ * 4;
        mbar_arrive_expect_tx(&full[s], 2 * kTileBytes + pbytes);
        tma_load_3d(st, &mK, &full[s], 0, static_cast<int>(k1), static_cast<int>(bh));
        tma_load_3d(st + kTileBytes, &mV, &full[s], 0, static_cast<int>(k1), static_cast<int>(bh));
        if constexpr (kTmaP) {
          if (cut_cols)
            issue_p_view<kViewRowsQ, kLdN>(st + 2 * kTileBytes, &mPn, &full[s], bh * S + Q0, S, k1);
          else
            issue_p_view<kViewRowsQ, kLdQ>(st + 2 * kTileBytes, cut_rows ? &mPr : &mP, &full[s], bh * S + Q0, S, k1);
        }
      }
      if constexpr (!kTmaP) {
        issue_p_ws<2 * kRows, kLdP>(reinterpret_cast<float*>(st + 2 * kTileBytes), Pbh, S, Q0, k1, cols, pt);
        cp_async_mbar_arrive_noinc(&full[s]);
      }
      if (++s == kStages) s = 0, phase ^= 1;
    }
    return;
  }
  // consumer warpgroups
  setmaxnreg_inc<232>();
  const int wgi = static_cast<int>(threadIdx.x) / kThreads - 1, ct = static_cast<int>(threadIdx.x) % kThreads;
  const int w = ct / 32, lane = ct & 31, g = lane >> 2, t = lane & 3;
  if (wgi >= nact) return;
  const Cta c = wg_block(p, bh, Q0, wgi);
  const std::uint8_t* sdO = base + wgi * kTileBytes;
  const int row_lo = kRows * wgi + w * 16 + g;  // this lane's rows of the stage's P tile: row_lo, row_lo + 8
  const int sh_lo = row_shift(Pbh, (Q0 + row_lo) * S), sh_hi = row_shift(Pbh, (Q0 + row_lo + 8) * S);
  // view layout (issue_p_view): rows row_lo and row_lo + 8 share a slot and are two box rows apart
  const int v_lo = (row_lo & 3) * kViewRowsQ * kLdQ + (row_lo >> 2) * kLdQ + view_phase(bh * S + Q0, row_lo & 3, S);
  float x[8][4], y[8][4];
  mma16::zero(x);
  mma16::zero(y);
  float dsum[2] = {0.0f, 0.0f};
  mbar_wait(dobar, 0);
  // the block's dO as the A operand of every dP product (RS instead of SS: 8 KB less shared-memory traffic per block),
  // loaded once and copied for each block (afrag_copy)
  std::uint32_t ado[4][4];
  afrag_of_tile(ado, sdO, w, lane);
  // with kRedInTile the tile is the column-sum scratch after the loop: every warp's reads of it come first (the
  // loop's warpgroup-wide products already order them; the barrier says so to compute-sanitizer's racecheck too)
  if constexpr (kRedInTile) named_barrier(1 + wgi, kThreads);
  int s = 0;
  std::uint32_t phase = 0;
  for (int64_t kb = 0; kb < nk; ++kb) {
    mbar_wait(&full[s], phase);
    const std::uint8_t* cK = base + kOffStages + s * kSB;
    const std::uint8_t* cV = cK + kTileBytes;
    const float* cP = reinterpret_cast<const float*>(cK + 2 * kTileBytes);
    std::uint32_t a[4][4];
    afrag_copy(a, ado);
    if (narrow_block(p, kb * kRows)) {  // keys kb·64 .. +15 alone
      float dp[2][4], pr[2][4];
      dp16_issue(dp, a, cV);
      // P's tile: the full view rows, or (p.trim_p) the narrow slots of kLdN floats
      const int v_n = (row_lo & 3) * kViewRowsQ * kLdN + (row_lo >> 2) * kLdN + view_phase(bh * S + Q0, row_lo & 3, S);
      const float* lo = !kTmaP        ? cP + row_lo * kLdP + sh_lo + 2 * t
                        : p.trim_p != 0 ? cP + v_n + 2 * t
                                        : cP + v_lo + 2 * t;
      const float* hi = !kTmaP        ? cP + (row_lo + 8) * kLdP + sh_hi + 2 * t
                        : p.trim_p != 0 ? lo + 2 * kLdN
                                        : lo + 2 * kLdQ;
      load_p(lo, hi, pr);
      zero_past(pr, t, static_cast<int>(S - kb * kRows));
      wgmma_wait<0>();
      fence_acc(dp);
      fence_afrag(a);
      p_and_w(pr, dp, dsum);
      std::uint32_t ap[4], aw[4];
      to_afrag16(ap, pr);
      to_afrag16(aw, dp);
      rs_products16(y, ap, cK, x, aw, cK);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
      if (++s == kStages) s = 0, phase ^= 1;
      continue;
    }
    float dp[8][4];
    mma16::zero(dp);
    fence_acc(dp);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_f16_rs<0>(dp, a[kk], kmajor(cV, kk), kk);
    wgmma_commit();
    float pr[8][4];
    if constexpr (kTmaP) {
      load_p(cP + v_lo + 2 * t, cP + v_lo + 2 * kLdQ + 2 * t, pr);
    } else {
      load_p(cP + row_lo * kLdP + sh_lo + 2 * t, cP + (row_lo + 8) * kLdP + sh_hi + 2 * t, pr);
    }
    zero_past(pr, t, static_cast<int>(S - kb * kRows));
    wgmma_wait<0>();
    fence_acc(dp);
    fence_afrag(a);
    p_and_w(pr, dp, dsum);
    std::uint32_t ap[4][4], aw[4][4];
    to_afrag(ap, pr);
    to_afrag(aw, dp);
    rs_products(y, ap, cK, x, aw, cK);
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
    if (++s == kStages) s = 0, phase ^= 1;
  }
  // kRedInTile: every product reading this warpgroup's dO tile was waited for in its last block
  std::uint8_t* red = kRedInTile ? base + wgi * kTileBytes : base + off_red(kStages) + wgi * 2048;
  finish_dq_wg(p, c, dsum, x, y, reinterpret_cast<float*>(red), ct, wgi);
  if constexpr (kWait == kWaitFlag) {  // this block's δ rows are written (by every warp): release them
    named_barrier(1 + wgi, kThreads);
    if (ct == 0) {
      __threadfence();
      atomicAdd(p.order + 1 + bh, 1u);
    }
  }
}

// The head and first row (dQ: query, dK/dV: key) of this CTA of a two-kernel launch: ⌈S/128⌉ CTAs per head.
__device__ __forceinline__ void ws_cta(int64_t S, int64_t& bh, int64_t& first) {
  const int64_t n = ws_ctas_per_head(S);
  bh = blockIdx.x / n;
  first = (blockIdx.x - bh * n) * 2 * kRows;
}

template <int kStages, bool kTmaP, int kLdQ = kLdP, bool kPdl = false>
__global__ void __launch_bounds__(kThreads3, 1)
    attn_dq_ws(const __grid_constant__ CUtensorMap mK, const __grid_constant__ CUtensorMap mV,
               const __grid_constant__ CUtensorMap mdO, const __grid_constant__ CUtensorMap mP,
               const __grid_constant__ CUtensorMap mPn, const __grid_constant__ CUtensorMap mPr,
               const __grid_constant__ AttnParams p) {
  int64_t bh, Q0;
  ws_cta(p.S, bh, Q0);
  extern __shared__ float4 smem4[];
  dq_ws_body<kStages, kTmaP, kLdQ, kPdl ? kWaitGrid : kWaitNone>(mK, mV, mdO, mP, mPn, mPr, p, bh, Q0,
                                                                 align_smem_1024(smem4));
}

// The dK/dV work of keys [K0, K0 + 128) of head bh (a CTA of attn_dkv_ws, or a dK/dV item of attn_fused_ws).
// mPk, mPkr: P's boxes kLdK wide (the whole view rows, and the narrow query block's kTrimRowsK), used where
// p.trim_p == 2 and the CTA's keys fit them (cut_keys).
template <int kStages, bool kTmaP, int kWait>
__device__ __forceinline__ void dkv_ws_body(const CUtensorMap& mQ, const CUtensorMap& mV, const CUtensorMap& mdO,
                                            const CUtensorMap& mP, const CUtensorMap& mPr, const CUtensorMap& mPk,
                                            const CUtensorMap& mPkr, const CUtensorMap& mDl, const AttnParams& p,
                                            int64_t bh, int64_t K0, std::uint8_t* base) {
  const int64_t S = p.S, nq = attn_blocks(S);
  const int nact = S - K0 > kRows ? 2 : 1;
  const int kcols = static_cast<int>(S - K0 < 2 * kRows ? S - K0 : 2 * kRows);  // keys of the CTA inside S
  const bool cut_keys = kTmaP && p.trim_p == 2 && kcols <= kLdK - 3;  // the CTA's keys fit kLdK with any phase
  constexpr int kSB = kTmaP ? kStageBytesWide : kStageBytes;
  const Bars<kStages, kSB> bars(base, kTmaP ? 1 : kThreads + 1, nact);
  std::uint64_t *full = bars.full, *empty = bars.empty, *vbar = bars.tiles;
  __syncthreads();
  const float* Pbh = p.P + bh * S * S;
  const int b = static_cast<int>(bh / p.H), h = static_cast<int>(bh - static_cast<int64_t>(b) * p.H);
  constexpr int kP = 2 * kTileBytes, kDl = kP + (kTmaP ? 4 * kViewBoxK : kRows * kLdP2 * 4);  // P and δ in a stage
  static_assert(kDl % 128 == 0, "δ's TMA box 128-byte aligned in shared memory");

  if (threadIdx.x < kThreads) {  // producer warpgroup, as in attn_dq_ws
    setmaxnreg_dec<40>();
    const int pt = static_cast<int>(threadIdx.x);
    if (kTmaP && pt != 0) return;  // thread 0 issues every copy (above: the others must not follow the barriers)
    // block i's δ (kRows floats) into dst, completing on bar: a tensor copy or a bulk copy (p.delta_tma)
    const auto load_delta = [&](std::uint8_t* dst, int64_t i, std::uint64_t* bar) {
      if (p.delta_tma)
        tma_load_2d(dst, &mDl, bar, static_cast<int>(i * kRows), static_cast<int>(bh));
      else
        bulk_load(dst, p.delta + bh * p.delta_ld + i * kRows, kRows * 4, bar);
    };
    if (pt == 0) {
      mbar_arrive_expect_tx(vbar, nact * kTileBytes);
      for (int i = 0; i < nact; ++i)
        tma_load_3d(base + i * kTileBytes, &mV, vbar, 0, static_cast<int>(K0 + i * kRows), static_cast<int>(bh));
    }
    int s = 0;
    std::uint32_t phase = 0;
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t q1 = qb * kRows;
      mbar_wait(&empty[s], phase ^ 1);
      std::uint8_t* st = base + kOffStages + s * kSB;
      if (pt == 0) {
        // trimmed boxes (p.trim_p): the narrow query block's 16 rows
        const bool cut_rows = kTmaP && p.trim_p != 0 && narrow_block(p, q1);
        mbar_arrive_expect_tx(&full[s], 2 * kTileBytes + kRows * 4 +
                                            (kTmaP ? 4 * (cut_rows ? kTrimRowsK : kViewRowsK) *
                                                         (cut_keys ? kLdK : kLdPV2) * 4
                                                   : 0));
        tma_load_3d(st, &mQ, &full[s], 0, static_cast<int>(q1), static_cast<int>(bh));
        tma_load_3d(st + kTileBytes, &mdO, &full[s], h * kD, static_cast<int>(q1), b);
        if (kWait == kWaitNone || qb >= kStages) load_delta(st + kDl, qb, &full[s]);
        if constexpr (kTmaP) {
          if (cut_keys)
            issue_p_view<kViewRowsK, kLdK>(st + kP, cut_rows ? &mPkr : &mPk, &full[s], bh * S + q1, S, K0);
          else
            issue_p_view<kViewRowsK, kLdPV2>(st + kP, cut_rows ? &mPr : &mP, &full[s], bh * S + q1, S, K0);
        }
        // kWaitGrid, kWaitFlag: δ comes from dQ work that may still run: the first stages' Q, dO and P are in flight
        // before the wait for it, then their δ (stage i holds block i)
        if (kWait != kWaitNone && qb == (nq < kStages ? nq : kStages) - 1) {
          if constexpr (kWait == kWaitGrid) {
            griddep_wait();
          } else {  // every 64-row query block of the head released its δ; the last of the head's items re-zeroes
            unsigned* done = p.order + 1 + p.B * p.H;  // its two counters for the next launch
            while (ld_acquire_gpu(p.order + 1 + bh) < static_cast<unsigned>(nq)) __nanosleep(128);
            fence_proxy_async_global();
            if (atomicAdd(done + bh, 1u) == static_cast<unsigned>(ws_ctas_per_head(S)) - 1) {
              atomicExch(p.order + 1 + bh, 0u);
              atomicExch(done + bh, 0u);
            }
          }
          for (int64_t i = 0; i <= qb; ++i) load_delta(base + kOffStages + i * kSB + kDl, i, &full[i]);
        }
      }
      if constexpr (!kTmaP) {
        issue_p_ws<kRows, kLdP2>(reinterpret_cast<float*>(st + kP), Pbh, S, q1, K0, kcols, pt);
        cp_async_mbar_arrive_noinc(&full[s]);
      }
      if (++s == kStages) s = 0, phase ^= 1;
    }
    return;
  }
  setmaxnreg_inc<232>();
  const int wgi = static_cast<int>(threadIdx.x) / kThreads - 1, ct = static_cast<int>(threadIdx.x) % kThreads;
  const int w = ct / 32, lane = ct & 31, g = lane >> 2, t = lane & 3;
  if (wgi >= nact) return;
  const Cta c = wg_block(p, bh, K0, wgi);
  const std::uint8_t* sV = base + wgi * kTileBytes;
  const int col0 = kRows * wgi + w * 16 + g;  // this lane's first key column in the stage's P tile
  // the consumers' whole work, with the stage's P rows kLdV floats apart: kLdK where this CTA's boxes are cut
  // (cut_keys), else kLdPV2; one instantiation per row stride, chosen once per CTA
  const auto consume = [&](auto ld_v) {
    constexpr int kLdV = decltype(ld_v)::value;
    float dk[8][4], dv[8][4];
    mma16::zero(dk);
    mma16::zero(dv);
    mbar_wait(vbar, 0);
    // the block's V·kDsScale as the A operand of every dPᵀ product, as dO in attn_dq_ws
    std::uint32_t av[4][4];
    afrag_of_tile(av, sV, w, lane);
    int s = 0;
    std::uint32_t phase = 0;
    for (int64_t qb = 0; qb < nq; ++qb) {
      const int64_t q1 = qb * kRows;
      mbar_wait(&full[s], phase);
      const std::uint8_t* cQ = base + kOffStages + s * kSB;
      const std::uint8_t* cdO = cQ + kTileBytes;
      const float* cP = reinterpret_cast<const float*>(cQ + kP);
      const float* cDl = reinterpret_cast<const float*>(cQ + kDl);
      std::uint32_t a[4][4];
      afrag_copy(a, av);
      if (narrow_block(p, q1)) {  // queries q1 .. q1 + 15 alone
        float dpt[2][4], pt[2][4];
        dp16_issue(dpt, a, cdO);
        load_pt_ws<kTmaP, kLdV>(pt, cP, Pbh, bh, S, q1, K0, col0, t);
        zero_past(pt, t, static_cast<int>(S - q1));
        std::uint32_t ap[4], as[4];
        to_afrag16(ap, pt);
        wgmma_wait<0>();
        fence_acc(dpt);
        fence_afrag(a);
        ds_transposed(pt, dpt, cDl);
        to_afrag16(as, dpt);
        rs_products16(dv, ap, cdO, dk, as, cQ);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
        if (++s == kStages) s = 0, phase ^= 1;
        continue;
      }
      float dpt[8][4];
      mma16::zero(dpt);
      fence_acc(dpt);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_m64n64k16_f16_rs<0>(dpt, a[kk], kmajor(cdO, kk), kk);
      wgmma_commit();
      float pt[8][4];  // attn::p_transposed on the CTA's 128-key rows
      load_pt_ws<kTmaP, kLdV>(pt, cP, Pbh, bh, S, q1, K0, col0, t);
      zero_past(pt, t, static_cast<int>(S - q1));  // query rows past S
      std::uint32_t ap[4][4], as[4][4];
      to_afrag(ap, pt);
      wgmma_wait<0>();
      fence_acc(dpt);
      fence_afrag(a);
      ds_transposed(pt, dpt, cDl);  // the stage's δ is 16-byte aligned
      to_afrag(as, dpt);
      rs_products(dv, ap, cdO, dk, as, cQ);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
      if (++s == kStages) s = 0, phase ^= 1;
    }
    mma16::scale_acc(dk, p.scale / kDsScale);
    float* red = reinterpret_cast<float*>(base + off_red(kStages, kSB) + wgi * 2048);
    store_part_wg(p, dk, c, 1, red, ct, wgi);
    store_part_wg(p, dv, c, 2, red + 4 * kD, ct, wgi);
  };
  if constexpr (kTmaP) {
    if (cut_keys) {
      consume(std::integral_constant<int, kLdK>{});
      return;
    }
  }
  consume(std::integral_constant<int, kLdPV2>{});
}

template <int kStages, bool kTmaP, bool kPdl = false>
__global__ void __launch_bounds__(kThreads3, 1)
    attn_dkv_ws(const __grid_constant__ CUtensorMap mQ, const __grid_constant__ CUtensorMap mV,
                const __grid_constant__ CUtensorMap mdO, const __grid_constant__ CUtensorMap mP,
                const __grid_constant__ CUtensorMap mPr, const __grid_constant__ CUtensorMap mPk,
                const __grid_constant__ CUtensorMap mPkr, const __grid_constant__ CUtensorMap mDl,
                const __grid_constant__ AttnParams p) {
  int64_t bh, K0;
  ws_cta(p.S, bh, K0);
  extern __shared__ float4 smem4[];
  dkv_ws_body<kStages, kTmaP, kPdl ? kWaitGrid : kWaitNone>(mQ, mV, mdO, mP, mPr, mPk, mPkr, mDl, p, bh, K0,
                                                            align_smem_1024(smem4));
}

// The work item of ticket t in the fused launch: heads' dQ items (n per head) and dK/dV items (n per head) in slots
// g = 0, 1, ...: slot g holds head g's dQ items (g < BH), then head (g − lag)'s dK/dV items (g ≥ lag). So a head's
// dK/dV items come about lag·2n tickets after its dQ items (enough for those to have finished: ~1.5 waves of CTAs).
// (At lag 8 their reads of P hit L2 on an H200, at 16 they do not; neither is faster: the gain of the one launch is
// its single partial last wave, perf/NOTES.md fourteenth session.) Tickets are taken in launch order by an atomic
// counter, so every item a dK/dV item waits for has a smaller ticket and already runs: no deadlock.
__device__ __forceinline__ void fused_item(int64_t t, int64_t BH, int64_t n, int64_t lag, bool& dq, int64_t& bh,
                                           int64_t& blk) {
  const int64_t head = lag * n, body = (BH - lag) * 2 * n;
  if (t < head) {
    dq = true, bh = t / n, blk = t - bh * n;
  } else if (t < head + body) {
    const int64_t u = t - head, g = u / (2 * n), r = u - g * 2 * n;
    dq = r < n;
    bh = dq ? lag + g : g;
    blk = dq ? r : r - n;
  } else {
    const int64_t u = t - head - body;
    dq = false, bh = BH - lag + u / n, blk = u - (u / n) * n;
  }
}

// One launch of both kinds of work (ATTNBWD_CUDA_MHA_FUSED): dQ items as attn_dq_ws<kStages, true, kLdPQ> CTAs and
// dK/dV items as attn_dkv_ws<kStages, true> CTAs, in the order of fused_item; p.order = [ticket | per-head δ
// blocks released | per-head dK/dV items past their wait], zero at launch and left zero.
template <int kStages>
__global__ void __launch_bounds__(kThreads3, 1)
    attn_fused_ws(const __grid_constant__ CUtensorMap mK, const __grid_constant__ CUtensorMap mV,
                  const __grid_constant__ CUtensorMap mdO, const __grid_constant__ CUtensorMap mPq,
                  const __grid_constant__ CUtensorMap mQ, const __grid_constant__ CUtensorMap mPk,
                  const __grid_constant__ CUtensorMap mPqn, const __grid_constant__ CUtensorMap mPqr,
                  const __grid_constant__ CUtensorMap mPkr, const __grid_constant__ CUtensorMap mPkk,
                  const __grid_constant__ CUtensorMap mPkkr, const __grid_constant__ CUtensorMap mDl,
                  const __grid_constant__ AttnParams p) {
  __shared__ unsigned ticket;
  const int64_t n = ws_ctas_per_head(p.S), BH = p.B * p.H;
  if (threadIdx.x == 0) {
    const unsigned t = atomicAdd(p.order, 1u);
    if (t == gridDim.x - 1) atomicExch(p.order, 0u);  // the last ticket: every CTA has taken its own
    ticket = t;
  }
  __syncthreads();
  bool dq;
  int64_t bh, blk;
  fused_item(ticket, BH, n, p.lag < BH ? p.lag : BH, dq, bh, blk);
  extern __shared__ float4 smem4[];
  std::uint8_t* base = align_smem_1024(smem4);
  if (dq) {
    dq_ws_body<kStages, true, kLdPQ, kWaitFlag>(mK, mV, mdO, mPq, mPqn, mPqr, p, bh, blk * 2 * kRows, base);
  } else {
    dkv_ws_body<kStages, true, kWaitFlag>(mQ, mV, mdO, mPk, mPkr, mPkk, mPkkr, mDl, p, bh, blk * 2 * kRows, base);
  }
}

}  // namespace ws
#else  // other passes of the fatbin: never launched there (the caller runs these on sm_90 devices only)

template <int kStages, int kCopy, int kMinBlocks, int kSplit>
__global__ void attn_dq_wg(const AttnParams) { __trap(); }
template <int kStages, int kCopy, int kMinBlocks, int kSplit>
__global__ void attn_dkv_wg(const AttnParams) { __trap(); }
namespace ws {
template <int kStages, bool kTmaP, int kLdQ = kLdP, bool kPdl = false>
__global__ void attn_dq_ws(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                           const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                           const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                           const __grid_constant__ AttnParams) {
  __trap();
}
template <int kStages, bool kTmaP, bool kPdl = false>
__global__ void attn_dkv_ws(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                            const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                            const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                            const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                            const __grid_constant__ AttnParams) {
  __trap();
}
template <int kStages>
__global__ void attn_fused_ws(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                              const __grid_constant__ AttnParams) {
  __trap();
}
}  // namespace ws

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

std::string attention_ws_unsupported_input(std::int64_t B, std::int64_t S, int H, const float* P) {
  if (reinterpret_cast<std::uintptr_t>(P) % 16 != 0) return "attn_weights not 16-byte aligned";
  if ((B * H * S) % 4 != 0)  // P's rows in fours: the view map of P (and every 16-byte chunk inside P)
    return "batch·heads·seq_len not a multiple of 4 (attn_weights cannot be viewed as rows of 4·seq_len floats)";
  return {};
}

std::string attention_ws_unsupported(const AttnParams& p) {
  const auto a16 = [](const void* x) { return reinterpret_cast<std::uintptr_t>(x) % 16 == 0; };
  if (const std::string why = attention_ws_unsupported_input(p.B, p.S, p.H, p.P); !why.empty()) return why;
  if (!a16(p.dO) || !a16(p.q) || !a16(p.k) || !a16(p.v) || !a16(p.delta)) return "operands not 16-byte aligned";
  if (p.delta_ld % kRows != 0 || p.delta_ld < attn_blocks(p.S) * kRows) return "delta_ld not a padded row stride";
  const std::int64_t ctas = p.B * p.H * ws_ctas_per_head(p.S);
  if (ctas >= (std::int64_t{1} << 31) || p.B * p.H >= (std::int64_t{1} << 31) || p.S >= (std::int64_t{1} << 31))
    return "grid or TMA coordinates past 32 bits";
  return {};
}

namespace {
// The warp-specialised kernels' TMA maps: q, k, v per head ([B·H][S][64] fp16), dO as rows of dA ([B][S][E] fp16,
// head h at column h·64), and P viewed as [B·H·S / 4][4·S] for the dQ (boxes of rows ldq floats wide) and the dK/dV
// kernel (kLdPV2), each only where that kernel takes P by TMA.
struct WsMaps {
  CUtensorMap q{}, k{}, v{}, dO{}, Pq{}, Pk{}, Pqn{}, Pqr{}, Pkr{};  // Pqn, Pqr, Pkr: the trimmed boxes (p.trim_p)
  CUtensorMap Pkk{}, Pkkr{};  // the dK/dV kernel's boxes kLdK wide (p.trim_p == 2: cut_keys)
  CUtensorMap dl{};           // δ as [B·H][delta_ld] fp32, boxes of one block's kRows (p.delta_tma)
  WsMaps(const AttnParams& p, bool tma_dq, bool tma_dkv, int ldq) {
    const std::int64_t BH = p.B * p.H, S = p.S, E = static_cast<std::int64_t>(p.H) * kD;
    const auto head_map = [&](const __half* t) { return sm90::tensor_map_3d_f16(t, kD, S, BH, kD, S * kD, kRows); };
    q = head_map(p.q), k = head_map(p.k), v = head_map(p.v);
    dO = sm90::tensor_map_3d_f16(p.dO, E, S, p.B, E, S * E, kRows);
    if (tma_dq) Pq = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ldq, ws::kViewRowsQ);
    if (tma_dkv) Pk = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ws::kLdPV2, ws::kViewRowsK);
    if (tma_dq && p.trim_p != 0) {
      Pqn = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ws::kLdN, ws::kViewRowsQ);
      Pqr = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ldq, ws::kTrimRowsQ);
    }
    if (tma_dkv && p.trim_p != 0)
      Pkr = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ws::kLdPV2, ws::kTrimRowsK);
    if (tma_dkv && p.trim_p == 2) {
      Pkk = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ws::kLdK, ws::kViewRowsK);
      Pkkr = sm90::tensor_map_2d_f32(p.P, 4 * S, BH * S / 4, 4 * S, ws::kLdK, ws::kTrimRowsK);
    }
    if (p.delta_tma) dl = sm90::tensor_map_2d_f32(p.delta, p.delta_ld, BH, p.delta_ld, kRows, 1);
  }
};

template <int kStages, bool kTmaQ, bool kTmaK, bool kWideQ = false, bool kPdl = false>
void launch_ws(const AttnParams& p, cudaStream_t stream) {
  constexpr int kLdQ = kWideQ ? ws::kLdPQ : kLdP;
  static_assert(!kWideQ || kTmaQ, "the wide dQ kernel takes P by TMA");
  const WsMaps m(p, kTmaQ, kTmaK, kLdQ);
  const std::size_t bytes = kWideQ ? ws::smem(kStages, ws::kStageBytesQ, 0) : ws::smem(kStages);
  const std::size_t bytes_kv = ws::smem(kStages, kTmaK ? ws::kStageBytesWide : ws::kStageBytes);
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(ws::attn_dq_ws<kStages, kTmaQ, kLdQ, kPdl>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(ws::attn_dkv_ws<kStages, kTmaK, kPdl>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes_kv)));
  const auto grid = static_cast<unsigned>(p.B * p.H * ws_ctas_per_head(p.S));
  ws::attn_dq_ws<kStages, kTmaQ, kLdQ, kPdl><<<grid, ws::kThreads3, bytes, stream>>>(m.k, m.v, m.dO, m.Pq, m.Pqn, m.Pqr,
                                                                                      p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  if constexpr (kPdl) {  // the dK/dV kernel as a programmatic dependent of the dQ kernel
    cudaLaunchAttribute attr[1] = {programmatic_dependent_attribute()};
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(ws::kThreads3);
    cfg.dynamicSmemBytes = bytes_kv;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, ws::attn_dkv_ws<kStages, kTmaK, kPdl>, m.q, m.v, m.dO, m.Pk, m.Pkr,
                                          m.Pkk, m.Pkkr, m.dl, p));
  } else {
    ws::attn_dkv_ws<kStages, kTmaK, kPdl><<<grid, ws::kThreads3, bytes_kv, stream>>>(m.q, m.v, m.dO, m.Pk, m.Pkr,
                                                                                     m.Pkk, m.Pkkr, m.dl, p);
    ATTNBWD_CUDA_CHECK_LAUNCH();
  }
}
}  // namespace

namespace {
template <int kStages>
void launch_fused(const AttnParams& p, cudaStream_t stream) {
  const WsMaps m(p, true, true, ws::kLdPQ);
  const std::size_t bytes = std::max(ws::smem(kStages, ws::kStageBytesQ, 0), ws::smem(kStages, ws::kStageBytesWide));
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(ws::attn_fused_ws<kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
  const auto grid = static_cast<unsigned>(2 * p.B * p.H * ws_ctas_per_head(p.S));
  ws::attn_fused_ws<kStages><<<grid, ws::kThreads3, bytes, stream>>>(m.k, m.v, m.dO, m.Pq, m.q, m.Pk, m.Pqn, m.Pqr,
                                                                     m.Pkr, m.Pkk, m.Pkkr, m.dl, p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}
}  // namespace

void attention_backward_sm90_ws(const AttnParams& p, bool tma_dq, bool tma_dkv, cudaStream_t stream, bool wide_dq,
                                bool pdl, bool fused) {
  const std::string why = attention_ws_unsupported(p);
  if (!why.empty()) fail("attention_backward_sm90_ws", __FILE__, __LINE__, why);
  if (fused) {
    if (pdl || !(wide_dq && tma_dq && tma_dkv) || p.order == nullptr || p.lag < 1)
      fail("attention_backward_sm90_ws", __FILE__, __LINE__,
           "the fused launch is built for wstmaw without pdl, with p.order and p.lag >= 1");
    if (2 * p.B * p.H * ws_ctas_per_head(p.S) >= (std::int64_t{1} << 31))
      fail("attention_backward_sm90_ws", __FILE__, __LINE__, "the fused launch's grid past 32 bits");
    return launch_fused<4>(p, stream);
  }
  if (pdl && !(wide_dq && tma_dq && tma_dkv))
    fail("attention_backward_sm90_ws", __FILE__, __LINE__, "the dependent launch is built for wstmaw only");
  if (pdl) return launch_ws<4, true, true, true, true>(p, stream);
  if (wide_dq && tma_dq && tma_dkv) return launch_ws<4, true, true, true>(p, stream);
  if (wide_dq)
    fail("attention_backward_sm90_ws", __FILE__, __LINE__, "the wide-row dQ kernel is built with P by TMA in both");
  if (tma_dq && !tma_dkv) return launch_ws<4, true, false>(p, stream);
  if (tma_dq && tma_dkv) return launch_ws<4, true, true>(p, stream);
  if (!tma_dq && !tma_dkv) return launch_ws<4, false, false>(p, stream);
  fail("attention_backward_sm90_ws", __FILE__, __LINE__, "not built: P by cp.async for dQ with TMA for dK/dV");
}

}  // namespace attnbwd::cuda::mha
