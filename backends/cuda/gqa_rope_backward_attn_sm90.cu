// gqa_rope_backward, steps 3-5 key-major on sm_90a wgmma (ATTNBWD_CUDA_GQA_ATTN; see gqa_rope_backward_attn.hpp).
//
// Per query block (64 queries) of a warpgroup's 64 keys, with their V (64 keys × 128) resident (kv_block):
//  1. Pᵀ as the A fragments of this warp's 16 keys × 64 queries, straight from the P tile by ldmatrix.trans
//     (P is staged row-major: rows = queries);
//  2. dPᵀ = V·dOᵀ: wgmma m64n64k16 × 8 (both operands K-major swizzled tiles; k = head_dim), rounded to bf16
//     as the reference's dP; dV += Pᵀ·dO issued behind it as a second group (it needs only P);
//  3. dSᵀ = bf16(bf16(Pᵀ⊙(dPᵀ − r_q))·scaling) element-wise in the accumulator layout (fp32, the reference's
//     rounding points), packed to bf16 A fragments, staged per warp and stored as 16-byte rows of dSᵀ;
//  4. dK += dSᵀ·Q: wgmma m64n64k16 with A from registers and B an N-major tile (rows = queries), two 64-column
//     halves (as dV).
// dV₃₂ and dK₃₂ are rounded once at the end. Tiles: 128-byte-swizzled [rows][64] bf16 halves (1024-byte
// aligned). Two kernels run kv_block: gqa_kv_attn_kernel (one warpgroup per 64 keys, two CTAs per SM, tiles
// by cp.async two blocks deep, the P tile in plain rows of 72 elements; S % 64 == 0) and gqa_kv_attn_ws_kernel
// (warp-specialised: a TMA producer warp and two consumer warpgroups per 128 keys on mbarriers, 3 stages;
// S % 128 == 0); the same products in the same order, so the same bits. No tails. Deterministic: no atomics,
// every sum in a fixed order.
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "check.hpp"
#include "gqa_rope_backward_attn.hpp"
#include "linear_backward_sm90.hpp"
#include "mma_fp16.cuh"
#include "sm90/ptx.cuh"

namespace attnbwd::cuda {
namespace {

using std::int64_t;
using bf = __nv_bfloat16;

constexpr int kD = 128;                     // head_dim
constexpr int kBlk = 64;                    // keys per warpgroup, queries per streamed block
constexpr int kWgThreads = 128;             // one warpgroup
constexpr int kSub = kBlk * 64 * 2;         // one swizzled [64][64] bf16 half tile: 8 KB
constexpr int kTile = 2 * kSub;             // [64][128]: head_dim 0-63 | 64-127
constexpr int kStages = 2;                  // blocks in flight (two CTAs per SM)
constexpr int kDsLd = 72;                   // dSᵀ staging row stride (elements)
constexpr int kLdP = kBlk + 8;              // P tile (64 queries × 64 keys) row stride: conflict-free ldmatrix
// Shared memory: V, then Q and dO tiles per stage (1024-byte aligned), the P tiles and r per stage, the dSᵀ
// staging rows (16 per warp); +1 KB to align. 110 KB: two CTAs per SM.
constexpr std::size_t kSmem = static_cast<std::size_t>(kTile) * (1 + 2 * kStages) +
                              static_cast<std::size_t>(kStages) * (kBlk * kLdP * 2 + kBlk * sizeof(float)) +
                              static_cast<std::size_t>(4) * 16 * kDsLd * 2 + 1024;

// The warp-specialised form's shared memory (below): V (128 keys), kWsStages stages, r, dSᵀ staging, barriers.
constexpr int kWsStages = 3;
constexpr int kWsStage = 3 * kTile;  // Q | dO | P (two 64-key halves): 48 KB, 1024-byte aligned
constexpr int kWsThreads = 3 * kWgThreads;
constexpr int kWsOffStages = 2 * kTile;                                   // after V (two 64-key tiles)
constexpr int kWsOffR = kWsOffStages + kWsStages * kWsStage;              // [kWsStages][64] floats
constexpr int kWsOffDs = kWsOffR + kWsStages * kBlk * 4;                  // 8 consumer warps × 16 rows
constexpr int kWsOffBar = kWsOffDs + 8 * 16 * kDsLd * 2;                  // full[], empty[], V
constexpr std::size_t kWsSmem = kWsOffBar + (2 * kWsStages + 1) * 8 + 1024;
// The warp-specialised dQ pass (gqa_dq_ws_kernel below): the two warpgroups' dO tiles, then kDqStages stages.
constexpr int kDqStages = 3;
constexpr int kDqStage = 3 * kTile;  // V | K | P (two warpgroups' 64 × 64 boxes): 48 KB
constexpr int kDqOffStages = 2 * kTile;  // after the two warpgroups' dO tiles
constexpr int kDqOffBar = kDqOffStages + kDqStages * kDqStage;
constexpr std::size_t kDqSmem = kDqOffBar + (2 * kDqStages + 1) * 8 + 1024;
// The dP + softmax kernel's shared memory (below), for WG warpgroups of 64 query rows each and CTAS CTAs per SM: WG dO
// tiles, kStages stages of V and of P's tile (rows of kPRow bytes: the 9 16-byte chunks that hold a row's 64 elements
// at any even byte), the dS staging rows (16 per warp). WG = 1, CTAS = 2: 104 KB, three stages, P rows of 160 bytes,
// staging rows of kDsLd elements; WG = 2, CTAS = 1: 159 KB, the same; WG = 1, CTAS = 3 (ATTNBWD_CUDA_GQA_DPSM=on3):
// 75 KB, so that three CTAs fill the SM's 228 KB with their 1 KB reserves — two stages, P rows of 144 bytes (the 9
// chunks, no padding; the pair reads of a warp's 8 rows fall in 8 distinct bank quads where S % 8 == 0, and are 2-way
// conflicted otherwise, as with 160-byte rows), staging rows of 64 elements with their 16-byte chunks XOR-swizzled by
// the row (conflict-free writes of a column pair per lane and reads of a row's chunks).
template <int WG, int CTAS = 2 / WG>
struct DpsmLayout {
  static_assert((WG == 1 && (CTAS == 2 || CTAS == 3)) || (WG == 2 && CTAS == 1), "the kernel's forms");
  static constexpr int kRows = kBlk * WG, kThreads = kWgThreads * WG, kCtasPerSm = CTAS;  // as launch_bounds
  static constexpr int kStages = CTAS == 3 ? 2 : 3;
  static constexpr int kPRow = CTAS == 3 ? 144 : 160;
  static constexpr bool kSwizzledDs = CTAS == 3;
  static constexpr int kDsRow = kSwizzledDs ? 64 : kDsLd;  // staging row stride (elements)
  static constexpr int kPStage = kRows * kPRow;
  static constexpr int kOffV = WG * kTile;  // after dO
  static constexpr int kOffP = kOffV + kStages * kTile;
  static constexpr int kOffDs = kOffP + kStages * kPStage;  // 4·WG warps × 16 rows × kDsRow
  static constexpr std::size_t kSmem = kOffDs + 4 * WG * 16 * kDsRow * 2 + 1024;
  // element offset of (row, 16-byte chunk c) in a warp's staging rows
  __host__ __device__ static constexpr int ds_at(int row, int c) {
    return row * kDsRow + (kSwizzledDs ? (c ^ (row & 7)) : c) * 8;
  }
  static_assert(CTAS * (kSmem + 1024) <= 228 * 1024, "CTAS CTAs per SM (1 KB reserved per CTA)");
};

#if defined(ATTNBWD_SM90_DEVICE)

using namespace sm90;

// Issues the copy of a [64][128] bf16 block (row stride ldg elements, 16-byte aligned rows) into a tile's
// two swizzled halves: 16-byte chunk c of row r at half c / 8, chunk (c % 8) ^ (r % 8).
template <int kThreads>
__device__ __forceinline__ void issue_tile(std::uint8_t* s, const bf* __restrict__ g, int64_t ldg) {
#pragma unroll
  for (int u = 0; u < kBlk * 16 / kThreads; ++u) {
    const int i = static_cast<int>(threadIdx.x) + u * kThreads, r = i >> 4, c = i & 15;
    mma16::cp_async16(s + (c >> 3) * kSub + r * 128 + (((c & 7) ^ (r & 7)) << 4), g + r * ldg + c * 8, true);
  }
}

// Descriptors of a swizzled half tile: K-major (k step kk: 16 columns = 32 bytes) and N-major (k step kk:
// 16 rows = 2,048 bytes; one 64-wide N chunk).
__device__ __forceinline__ std::uint64_t kmajor(const std::uint8_t* half, int kk) {
  return smem_desc(smem_addr(half) + 32 * kk, 16, 1024);
}
__device__ __forceinline__ std::uint64_t nmajor(const std::uint8_t* half, int kk) {
  return smem_desc(smem_addr(half) + 2048 * kk, kSub, 1024);
}

__device__ __forceinline__ float lo16(std::uint32_t x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float hi16(std::uint32_t x) { return __uint_as_float(x & 0xFFFF0000u); }
__device__ __forceinline__ std::uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // lo in the low 16 bits
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

__device__ __forceinline__ void fence_frag(std::uint32_t (&a)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[k][i])::"memory");
}

// Rounds acc (this warp's 16 rows × 64 columns of a [64][128] half) and stores it at out (row stride 128).
__device__ __forceinline__ void store_half(bf* out, const float (&acc)[8][4], int half) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, w = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      *reinterpret_cast<std::uint32_t*>(out + (16 * w + g + 8 * h) * kD + 64 * half + 8 * j + 2 * t) =
          pack(acc[j][2 * h], acc[j][2 * h + 1]);
}

// cp.async of 16 bytes to a shared-memory address (no zero fill).
__device__ __forceinline__ void cp16(std::uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

// The byte_perm selector that takes 4 bytes from byte b (even) of two consecutive 4-byte words starting at word b / 4:
// bytes 0-3 of the first where b % 4 == 0, else bytes 2-5 (2-3 of the first, 0-1 of the second).
__device__ __forceinline__ std::uint32_t pair_sel(int b) { return (b & 2) ? 0x5432u : 0x3210u; }

// A warpgroup's dK₃₂ and dV₃₂ rows (its 64 keys of [BH·S, 128], from dK and dV), rounded once.
__device__ __forceinline__ void store_kv(bf* dK, bf* dV, const float (&dk)[2][8][4], const float (&dv)[2][8][4]) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    store_half(dK, dk[hf], hf);
    store_half(dV, dv[hf], hf);
  }
}

// acc (64 × 64) += A·Bᵀ over k = head_dim 128, as 8 wgmma k steps (both operands K-major [64][128] tiles given by their
// half-0 descriptors: k step kk at half kk / 4, 32 bytes per step); acc is zeroed by its first step's scale-d = 0.
__device__ __forceinline__ void ss_k128(float (&acc)[8][4], std::uint64_t a, std::uint64_t b) {
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const std::uint64_t off = (kk >> 2) * (kSub >> 4) + (kk & 3) * 2;
    wgmma_m64n64k16_ss<Mma16::BF16, 0>(acc, a + off, b + off, kk);
  }
}

// acc (64 rows × 128 as two 64-column halves) += A·B over k = 64: A this warp's fragments (registers), B an N-major
// [64][128] tile given by its half-0 descriptor (k step: 16 rows = 2,048 bytes; half: kSub bytes).
__device__ __forceinline__ void rs_n128(float (&acc)[2][8][4], const std::uint32_t (&a)[4][4], std::uint64_t desc) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int kc = 0; kc < 4; ++kc)
      wgmma_m64n64k16_rs<Mma16::BF16, 1>(acc[hf], a[kc], desc + hf * (kSub >> 4) + kc * (2048 >> 4), 1);
}

// One 64-query block of a warpgroup's 64 keys, given this lane's Pᵀ fragments ap and r values rq (columns 8j + 2t,
// +1): dPᵀ = V·dOᵀ (SS), dV += Pᵀ·dO as a second group under the element-wise step, dSᵀ into as and through
// the warp's staging rows sDs to dSᵀ's rows (dS_c: this lane's chunk; q_at: the block's first query), then
// dK += dSᵀ·Q; returns with every product done. dV: V's K-major descriptor; dOk, dOn, dQn: the block's dO
// (K- and N-major) and Q (N-major) descriptors at head_dim half 0.
template <bool kDs = true>  // false: dSᵀ is not stored (the dQ pass of ATTNBWD_CUDA_GQA_KVDQ made dQ without it)
__device__ __forceinline__ void kv_block(std::uint32_t (&ap)[4][4], const float2 (&rq)[8], std::uint64_t dV,
                                         std::uint64_t dOk, std::uint64_t dOn, std::uint64_t dQn, float scaling,
                                         bf* sDs, bf* dS_c, int64_t S, int64_t q_at, float (&dk)[2][8][4],
                                         float (&dv)[2][8][4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  std::uint32_t as[4][4];
  float dpt[8][4];
  mma16::zero(dpt);
  fence_acc(dpt);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) fence_acc(dv[hf]);
  wgmma_fence();
  ss_k128(dpt, dV, dOk);
  wgmma_commit();
  rs_n128(dv, ap, dOn);
  wgmma_commit();
  wgmma_wait<1>();  // dPᵀ is done; dV may still run
  fence_acc(dpt);
  // dSᵀ, a pair at a time; register 2·jj + h of k step kc: columns 8(2kc + jj) + 2t, +1; rows g + 8h
#pragma unroll
  for (int kc = 0; kc < 4; ++kc)
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int j = 2 * kc + jj;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::uint32_t pp = ap[kc][2 * jj + h];
        const std::uint32_t dp = pack(dpt[j][2 * h], dpt[j][2 * h + 1]);  // bf16 dP
        const std::uint32_t x = pack(lo16(pp) * (lo16(dp) - rq[j].x), hi16(pp) * (hi16(dp) - rq[j].y));
        const std::uint32_t ds = pack(lo16(x) * scaling, hi16(x) * scaling);
        as[kc][2 * jj + h] = ds;
        if constexpr (kDs) *reinterpret_cast<std::uint32_t*>(sDs + (g + 8 * h) * kDsLd + 8 * j + 2 * t) = ds;
      }
    }
  if constexpr (kDs) {
    __syncwarp();
#pragma unroll
    for (int u = 0; u < 4; ++u)
      *reinterpret_cast<uint4*>(dS_c + 4 * u * S + q_at) =
          *reinterpret_cast<const uint4*>(sDs + ((lane >> 3) + 4 * u) * kDsLd + (lane & 7) * 8);
    __syncwarp();  // read before the next block's writes
  }
  // dK += dSᵀ·Q
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) fence_acc(dk[hf]);
  wgmma_fence();
  rs_n128(dk, as, dQn);
  wgmma_commit();
  wgmma_wait<0>();
  fence_frag(ap);
  fence_frag(as);
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) fence_acc(dv[hf]), fence_acc(dk[hf]);
}

// dSᵀ goes out through a warp-private staging tile as 16-byte stores. Every per-block address is a fixed
// per-thread offset plus the block's: the loads step 64-bit pointers, the wgmma descriptors are built once and
// offset (an ncu profile of the first version: ~40 % of its instructions were address arithmetic, at ~5 cycles
// per issued instruction with two warps per scheduler).
__global__ void __launch_bounds__(kWgThreads, 2) gqa_kv_attn_kernel(const GqaKvAttn p) {
  constexpr int kThreads = kWgThreads;
  const int64_t S = p.S, bh = blockIdx.y, k0 = static_cast<int64_t>(blockIdx.x) * kBlk;
  const int tid = static_cast<int>(threadIdx.x);
  extern __shared__ float4 smem4[];
  std::uint8_t* sV = align_smem_1024(smem4);
  std::uint8_t* sQ = sV + kTile;                      // [kStages]
  std::uint8_t* sdO = sQ + kStages * kTile;           // [kStages]
  bf* sP = reinterpret_cast<bf*>(sdO + kStages * kTile);             // [kStages][64][kLdP]
  float* sR = reinterpret_cast<float*>(sP + kStages * kBlk * kLdP);  // [kStages][64]
  bf* sDs = reinterpret_cast<bf*>(sR + kStages * kBlk) + (tid >> 5) * 16 * kDsLd;  // this warp's 16 rows
  const int w = (tid >> 5) & 3, lane = tid & 31, t = lane & 3;
  const float* R = p.r + bh * S;
  // staged stores: lane takes 16-byte chunk lane % 8 of rows lane / 8 + 4u of the warp's 16
  bf* dS_c = p.dS_t + (bh * S + k0 + 16 * w + (lane >> 3)) * S + (lane & 7) * 8;

  // Loads. Q, dO and V tiles: chunk c16 of rows r0 + kRowStep·u (swizzle c ^ (r % 8), the same for every u);
  // P tile: chunk pc of rows pr0 + kPRowStep·u.
  constexpr int kRowStep = kThreads / 16, kPRowStep = kThreads / 8;
  const int r0 = tid >> 4, c16 = tid & 15, pr0 = tid / 8, pc = tid % 8;
  const std::uint32_t tile_off = (c16 >> 3) * kSub + r0 * 128 + (((c16 & 7) ^ (r0 & 7)) << 4);
  const std::uint32_t sQ0 = smem_addr(sQ) + tile_off, sdO0 = smem_addr(sdO) + tile_off;
  const std::uint32_t sP0 = smem_addr(sP) + (pr0 * kLdP + pc * 8) * 2, sR0 = smem_addr(sR) + tid * 16;
  const bf* q_src = p.Q + bh * S * kD + r0 * kD + c16 * 8;
  const bf* do_src = p.dO + bh * p.do_head + r0 * p.do_ld + c16 * 8;
  const bf* p_src = p.P + bh * S * S + k0 + pr0 * S + pc * 8;
  const int64_t do_step = kRowStep * p.do_ld, p_step = kPRowStep * S;

  {
    const bf* v = p.V + (bh * S + k0) * kD + r0 * kD + c16 * 8;
    const std::uint32_t sv = smem_addr(sV) + tile_off;
#pragma unroll
    for (int u = 0; u < kBlk / kRowStep; ++u) cp16(sv + u * kRowStep * 128, v + u * kRowStep * kD);
  }
  // Descriptors: V (K-major), dO K- and N-major, Q N-major, at buffer 0; a buffer, half tile or k step adds its
  // byte offset / 16 to the start-address field (every address < 256 KB: no carry out of it).
  const std::uint64_t dV = kmajor(sV, 0), dOk = kmajor(sdO, 0), dOn = nmajor(sdO, 0),
                      dQn = nmajor(sQ, 0);
  float dk[2][8][4], dv[2][8][4];
  mma16::zero(dk[0]);
  mma16::zero(dk[1]);
  mma16::zero(dv[0]);
  mma16::zero(dv[1]);
  // ldmatrix.trans source of this lane: matrix m = lane / 8 (keys +8 for m odd, queries +8 for m ≥ 2), row lane % 8
  const std::uint32_t p_lane =
      smem_addr(sP) + (((lane & 7) + ((lane >> 4) << 3)) * kLdP + 16 * w + (((lane >> 3) & 1) << 3)) * 2;
  const float scaling = p.scaling;
  int64_t q_at = 0;
  mma16::stream_blocks_deep<kBlk, kStages, true>(
      0, S,
      [&](int64_t q1, int, int to) {
        const std::uint32_t tq = sQ0 + to * kTile, tdo = sdO0 + to * kTile;
        const bf* qs = q_src + q1 * kD;
        const bf* ds = do_src + q1 * p.do_ld;
#pragma unroll
        for (int u = 0; u < kBlk / kRowStep; ++u) {
          cp16(tq + u * kRowStep * 128, qs + u * kRowStep * kD);
          cp16(tdo + u * kRowStep * 128, ds);
          ds += do_step;
        }
        const std::uint32_t tp = sP0 + to * (kBlk * kLdP * 2);
        const bf* ps = p_src + q1 * S;
#pragma unroll
        for (int u = 0; u < kBlk / kPRowStep; ++u) {
          cp16(tp + u * kPRowStep * kLdP * 2, ps);
          ps += p_step;
        }
        if (tid < kBlk / 4) cp16(sR0 + to * kBlk * 4, R + q1 + 4 * tid);
      },
      [&](int buf, int) {
        const std::uint64_t bdo = static_cast<std::uint64_t>(buf) * (kTile >> 4);
        const float* cR = sR + buf * kBlk;
        // 1. Pᵀ fragments; dPᵀ = V·dOᵀ (rows: the CTA's keys; columns: the 64 queries), then dV += Pᵀ·dO
        // as a second group that runs under the element-wise step (it needs only P)
        std::uint32_t ap[4][4];
        const std::uint32_t pl = p_lane + buf * (kBlk * kLdP * 2);
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) mma16::ldsm4_trans(ap[kc], pl + 16 * kc * kLdP * 2);
        float2 rq[8];  // r of this lane's query columns 8j + 2t, +1, read before the products (not on the chain)
#pragma unroll
        for (int j = 0; j < 8; ++j) rq[j] = *reinterpret_cast<const float2*>(cR + 8 * j + 2 * t);
        kv_block(ap, rq, dV, dOk + bdo, dOn + bdo, dQn + bdo, scaling, sDs, dS_c, S, q_at, dk, dv);
        q_at += kBlk;
      });
  store_kv(p.dK + (bh * S + k0) * kD, p.dV + (bh * S + k0) * kD, dk, dv);
}

// ---- warp-specialised form (ATTNBWD_CUDA_GQA_ATTN=kvws) ---------------------------------------------------
// One CTA per (b·h, 128 keys): a producer warp loads every stage by TMA (Q, dO, the 64 × 128 P block as two
// 64-key halves, all 128-byte swizzled) and r by a bulk copy, on full/empty mbarriers; two consumer warpgroups,
// each owning 64 keys, run kv_block on the stage without a CTA barrier, so one's element-wise step can overlap
// the other's products; registers 40 (producer) / 232 (consumers). S % 128 == 0.

// Where dO's 64 × 64 box of (bh, q0, head_dim half h) starts in its tensor map: rows of [BH·S, 128] (split) or
// of [S, do_ld] with the head's columns at bh·do_head (the view of dA, B = 1).
__device__ __forceinline__ void do_coords(int64_t do_head, int64_t S, bool view, int bh, int q0, int h, int& c0,
                                          int& c1) {
  c0 = view ? static_cast<int>(bh * do_head) + 64 * h : 64 * h;
  c1 = view ? q0 : static_cast<int>(bh * S) + q0;
}

// The warp-specialised kernels' barriers (thread 0 initialises them, then the CTA meets): per stage a full barrier (one
// arrival, the producer's, with the stage's bytes) and an empty one (one arrival per consumer warpgroup), and `once`
// for the tiles loaded once.
template <int kStagesN>
__device__ __forceinline__ void init_ws_barriers(std::uint64_t* full, std::uint64_t* empty, std::uint64_t* once) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStagesN; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 2);
    }
    mbar_init(once, 1);
    mbar_init_fence();
  }
  __syncthreads();
}

template <bool kDs>  // false: no dSᵀ (p.dS_t null: ATTNBWD_CUDA_GQA_KVDQ's dQ pass made dQ)
__global__ void __launch_bounds__(kWsThreads, 1)
    gqa_kv_attn_ws_kernel(const __grid_constant__ CUtensorMap mQ, const __grid_constant__ CUtensorMap mV,
                          const __grid_constant__ CUtensorMap mdO, const __grid_constant__ CUtensorMap mP,
                          const __grid_constant__ CUtensorMap mR, const __grid_constant__ GqaKvAttn p,
                          const int do_view) {
  const int64_t S = p.S;
  const int bh = static_cast<int>(blockIdx.y), kc0 = static_cast<int>(blockIdx.x) * 2 * kBlk;
  extern __shared__ float4 smem4[];
  std::uint8_t* base = align_smem_1024(smem4);
  std::uint8_t* sV = base;
  std::uint8_t* stages = base + kWsOffStages;
  float* sR = reinterpret_cast<float*>(base + kWsOffR);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(base + kWsOffBar);
  std::uint64_t* empty = full + kWsStages;
  std::uint64_t* vbar = empty + kWsStages;
  const int nblk = static_cast<int>(S / kBlk);
  init_ws_barriers<kWsStages>(full, empty, vbar);

  if (threadIdx.x < kWgThreads) {  // producer warpgroup: one thread issues every copy
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      const int row0 = bh * static_cast<int>(S);
      mbar_arrive_expect_tx(vbar, 2 * kTile);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) tma_load_2d(sV + i * kTile + h * kSub, &mV, vbar, 64 * h, row0 + kc0 + kBlk * i);
      int s = 0;
      std::uint32_t phase = 0;
      for (int i = 0; i < nblk; ++i) {
        mbar_wait(&empty[s], phase ^ 1);
        std::uint8_t* st = stages + s * kWsStage;
        const int q0 = i * kBlk;
        mbar_arrive_expect_tx(&full[s], kWsStage + kBlk * 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          tma_load_2d(st + h * kSub, &mQ, &full[s], 64 * h, row0 + q0);
          int c0, c1;
          do_coords(p.do_head, p.S, do_view != 0, bh, q0, h, c0, c1);
          tma_load_2d(st + kTile + h * kSub, &mdO, &full[s], c0, c1);
          tma_load_2d(st + 2 * kTile + h * kSub, &mP, &full[s], kc0 + kBlk * h, row0 + q0);
        }
        // r's 64 values by a tensor copy (rows of 64 floats), not a plain bulk copy: compute-sanitizer's racecheck
        // reports a bulk copy into shared memory against the reads its mbarrier orders (README, Reliability)
        tma_load_2d(sR + s * kBlk, &mR, &full[s], 0, (row0 + q0) / kBlk);
        if (++s == kWsStages) s = 0, phase ^= 1;
      }
    }
  } else {  // consumer warpgroups
    setmaxnreg_inc<232>();
    const int wgi = static_cast<int>(threadIdx.x) / kWgThreads - 1, ct = static_cast<int>(threadIdx.x) % kWgThreads;
    const int w = ct >> 5, lane = ct & 31, t = lane & 3;
    const int64_t k0 = kc0 + kBlk * wgi;
    bf* sDs = reinterpret_cast<bf*>(base + kWsOffDs) + (wgi * 4 + w) * 16 * kDsLd;
    bf* dS_c = kDs ? p.dS_t + (bh * S + k0 + 16 * w + (lane >> 3)) * S + (lane & 7) * 8 : nullptr;
    const std::uint64_t dV = kmajor(sV + wgi * kTile, 0), dOk = kmajor(stages + kTile, 0),
                        dOn = nmajor(stages + kTile, 0), dQn = nmajor(stages, 0);
    // ldmatrix.trans source of this lane in a swizzled P half: row (lane & 7) + 8·(lane ≥ 16) (+16 per k step),
    // logical chunk 2w + (lane / 8 odd), stored at chunk ^ (row % 8)
    const std::uint32_t p_lane = smem_addr(stages + 2 * kTile + wgi * kSub) +
                                 ((lane & 7) + ((lane >> 4) << 3)) * 128 +
                                 (((2 * w + ((lane >> 3) & 1)) ^ (lane & 7)) << 4);
    const float scaling = p.scaling;
    float dk[2][8][4], dv[2][8][4];
    mma16::zero(dk[0]);
    mma16::zero(dk[1]);
    mma16::zero(dv[0]);
    mma16::zero(dv[1]);
    mbar_wait(vbar, 0);
    int s = 0;
    std::uint32_t phase = 0;
    for (int i = 0; i < nblk; ++i) {
      mbar_wait(&full[s], phase);
      const std::uint32_t so = static_cast<std::uint32_t>(s) * kWsStage;
      const std::uint64_t bdo = so >> 4;
      std::uint32_t ap[4][4];
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) mma16::ldsm4_trans(ap[kc], p_lane + so + kc * 2048);
      float2 rq[8];
      const float* cR = sR + s * kBlk;
#pragma unroll
      for (int j = 0; j < 8; ++j) rq[j] = *reinterpret_cast<const float2*>(cR + 8 * j + 2 * t);
      kv_block<kDs>(ap, rq, dV, dOk + bdo, dOn + bdo, dQn + bdo, scaling, sDs, dS_c, S, static_cast<int64_t>(i) * kBlk,
               dk, dv);
      named_barrier(1 + wgi, kWgThreads);  // every warp of this warpgroup is done with stage s
      if (ct == 0) mbar_arrive(&empty[s]);
      if (++s == kWsStages) s = 0, phase ^= 1;
    }
    store_kv(p.dK + (bh * S + k0) * kD, p.dV + (bh * S + k0) * kD, dk, dv);
  }
}

// ---- query-major dP + softmax backward (ATTNBWD_CUDA_GQA_DPSM; see gqa_rope_backward_attn.hpp) -------------
// One CTA per (b·h, 64·WG query rows q0.. of the Sp-row attention buffers): WG = 1, one warpgroup, two CTAs per SM;
// WG = 2 (wide), two warpgroups of 64 rows sharing every V tile, one CTA per SM. Two passes over the head's 64-key
// tiles, each tile's dP = bf16(dO·Vᵀ) computed by wgmma (m64n64k16 × 8 per warpgroup, both operands K-major; dO
// resident) in both passes — recomputed rather than kept: keeping a block's dP and P rows resident took 222 KB of
// shared memory, one CTA per SM, and measured slower than the GEMM + row kernel it replaces (perf/NOTES.md);
//  pass 1: r = Σ P·dP over the row (fp32, this thread's columns in tile order, then over the row's quad of lanes);
//  pass 2: dS = bf16(bf16(P⊙(dP − r))·scaling), staged per warp and stored as 16-byte pieces of dS's rows, and (with
//          Pp) P's padded copy from the staged P tile; rows S ≤ s < Sp and columns S ≤ k < Sp zero.
// Tiles stream three deep by cp.async: V (rows ≥ Sp zero-filled) and P's 64 × 64 tile, each row's 128 bytes at any
// even byte: the 16-byte chunks holding them (≤ 9) at a row stride of kPRow bytes, read back at the row's offset.
// P comes from DRAM once (pass 2's tiles are L2 hits while the CTA's rows are in flight); dP is never written.
// RO (p.O given, ATTNBWD_CUDA_GQA_PV=side): r = Σ_d dO·O from O = bf16(P·V), which the op computes beside its dA GEMM,
// before the stream; pass 2 alone (half the products and one read of P).

// Per pair of columns (8j + 2t, +1) of a row: the two bf16 of P (lo, hi) from the staged row, whose elements start at
// byte `off` (even): words w = (off + 4t) / 4 + 4j and w + 1, bytes chosen by sel = pair_sel(off); the kernel masks pad
// columns and rows to 0 on partial tiles.
struct PRow {
  const std::uint32_t* w;  // word (off + 4t) / 4 of the row in stage 0
  std::uint32_t sel;
};

template <int WG, int CTAS, bool RO = false>
__global__ void __launch_bounds__(kWgThreads * WG, CTAS) gqa_dp_softmax_kernel(const GqaDpSoftmax p) {
  using L = DpsmLayout<WG, CTAS>;
  constexpr int kRows = L::kRows, kThreads = L::kThreads, kPStage = L::kPStage, kPRow = L::kPRow;
  const int S = static_cast<int>(p.S), Sp = static_cast<int>(p.Sp);
  const int64_t bh = blockIdx.y;
  const int q0 = static_cast<int>(blockIdx.x) * kRows;
  const int nt = (Sp + kBlk - 1) / kBlk;
  // w: the warp of the CTA (its 16 rows 16w..16w+15); wg: its warpgroup (the rows 64wg.. of its wgmma)
  const int tid = static_cast<int>(threadIdx.x), w = tid >> 5, wg = w >> 2, lane = tid & 31, g = lane >> 2,
            t = lane & 3;
  extern __shared__ float4 smem4[];
  std::uint8_t* sdO = align_smem_1024(smem4);
  std::uint8_t* sV = sdO + L::kOffV;
  std::uint8_t* sP = sdO + L::kOffP;
  bf* sDs = reinterpret_cast<bf*>(sdO + L::kOffDs) + w * 16 * L::kDsRow;  // this warp's 16 rows
  const std::uintptr_t pend = reinterpret_cast<std::uintptr_t>(p.P) + 2 * static_cast<std::uintptr_t>(p.BH * p.S * p.S);
  // byte address of P(bh, q0 + i, 0); a row's byte offset in its 16-byte chunk is the same for every key tile (64 keys:
  // 128 bytes)
  const auto row_at = [&](int i) {
    return reinterpret_cast<std::uintptr_t>(p.P + (bh * p.S + q0 + i) * p.S);
  };
  // this thread's P chunks of every tile: idx = tid + kThreads·u → row i = idx / 9, chunk c = idx % 9. With the row's
  // byte offset off in its 16-byte chunk (the same for every tile), chunk c of the tile at k0 starts at
  // pch[u] + 2·k0 and holds needed bytes where 16c − off < 2n (n: the tile's columns); pch[u] = 0: no such row.
  constexpr int kPChunks = (kRows * 9 + kThreads - 1) / kThreads;
  std::uintptr_t pch[kPChunks];
  int plim[kPChunks];
  std::uint32_t pdst[kPChunks];  // shared address in stage 0
#pragma unroll
  for (int u = 0; u < kPChunks; ++u) {
    const int idx = tid + u * kThreads, i = idx / 9, c = idx % 9;
    const bool ok = idx < kRows * 9 && q0 + i < S;
    const std::uintptr_t A = ok ? row_at(i) : 0;
    const int off = static_cast<int>(A & 15);
    pch[u] = ok ? A - off + 16 * c : 0;
    plim[u] = 16 * c - off;
    pdst[u] = smem_addr(sP) + i * kPRow + 16 * c;
  }
  {  // the dO tiles (one per warpgroup; rows ≥ Sp zero), committed with the first tiles
    const bf* src = p.dO + bh * p.do_head;
#pragma unroll
    for (int u = 0; u < kRows * 16 / kThreads; ++u) {
      const int i = tid + u * kThreads, r = i >> 4, c = i & 15, rt = r & (kBlk - 1);
      const bool ok = q0 + r < Sp;
      mma16::cp_async16(
          smem_addr(sdO) + (r / kBlk) * kTile + (c >> 3) * kSub + rt * 128 + (((c & 7) ^ (rt & 7)) << 4),
          ok ? src + static_cast<int64_t>(q0 + r) * p.do_ld + c * 8 : src, ok);
    }
  }
  const bf* vsrc = p.V + bh * static_cast<int64_t>(Sp) * kD;
  // this thread's V chunks: rows v_row + (kThreads / 16)·u of the tile, chunk tid % 16 (the swizzle is the same for
  // every u: (kThreads / 16)·u is a multiple of 8)
  constexpr int kVRowStep = kThreads / 16;
  const int v_row = tid >> 4, v_c = tid & 15;
  const bf* v_src = vsrc + v_row * kD + v_c * 8;
  const std::uint32_t v_dst = smem_addr(sV) + (v_c >> 3) * kSub + v_row * 128 + (((v_c & 7) ^ (v_row & 7)) << 4);
  const std::uint64_t dOk = kmajor(sdO + wg * kTile, 0), dVk = kmajor(sV, 0);
  // the accumulator rows row_a + 8h (the warpgroup's m64 layout: warp w % 4 holds its rows 16(w % 4)..): staged P
  // words and byte selectors, valid-row flags
  const int row_a = 16 * w + g;
  PRow pr[2];
  int rows_n[2];  // S for a row of P, 0 for a pad row (every column masked)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = row_a + 8 * h;
    const bool ok = q0 + i < S;
    const int off = ok ? static_cast<int>(row_at(i) & 15) : 0;
    pr[h].w = reinterpret_cast<const std::uint32_t*>(sP + i * kPRow + ((off + 4 * t) & ~3));
    pr[h].sel = pair_sel(off);
    rows_n[h] = ok ? S : 0;
  }
  // the store rows 16w + lane / 8 + 4u, chunk c = lane % 8: dS's and Pp's row pointers at the chunk's column (null: a
  // row ≥ Sp, or no Pp), and the chunk's 8 elements of P in the staged row of stage 0, from byte b (even): the offset
  // of the word holding the first, and the byte selector that takes them from two words (pair_sel)
  bf* ds_at[4];
  bf* pp_at[4];
  int pw_at[4];
  std::uint32_t pw_sel[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int i = 16 * w + (lane >> 3) + 4 * u, q = q0 + i;
    const int off = q < S ? static_cast<int>(row_at(i) & 15) : 0, b = off + 16 * (lane & 7);
    const int64_t at = (bh * Sp + q) * static_cast<int64_t>(Sp) + 8 * (lane & 7);
    ds_at[u] = q < Sp ? p.dS + at : nullptr;
    pp_at[u] = q < Sp && p.Pp != nullptr ? p.Pp + at : nullptr;
    pw_at[u] = i * kPRow + (b & ~3);
    pw_sel[u] = pair_sel(b);
  }
  float r[2] = {0.0f, 0.0f};
  if constexpr (RO) {
    // r of the accumulator rows row_a + 8h: lane t of the row's quad takes columns 32t..32t + 31 (four 16-byte pieces of
    // dO's and O's rows), then the quad's sum (a fixed order); pad rows (≥ S) 0.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int q = q0 + row_a + 8 * h;
      if (q < S) {
        const uint4* a = reinterpret_cast<const uint4*>(p.dO + bh * p.do_head + static_cast<int64_t>(q) * p.do_ld + 32 * t);
        const uint4* o = reinterpret_cast<const uint4*>(p.O + (bh * p.S + q) * kD + 32 * t);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const uint4 x = a[u], y = o[u];
          r[h] += lo16(x.x) * lo16(y.x) + hi16(x.x) * hi16(y.x);
          r[h] += lo16(x.y) * lo16(y.y) + hi16(x.y) * hi16(y.y);
          r[h] += lo16(x.z) * lo16(y.z) + hi16(x.z) * hi16(y.z);
          r[h] += lo16(x.w) * lo16(y.w) + hi16(x.w) * hi16(y.w);
        }
      }
      r[h] += __shfl_xor_sync(0xffffffffu, r[h], 1);
      r[h] += __shfl_xor_sync(0xffffffffu, r[h], 2);
    }
  }
  const float scaling = p.scaling;
  int step = RO ? nt : 0;
  mma16::stream_blocks_deep<kBlk, L::kStages, true>(
      RO ? static_cast<int64_t>(nt) * kBlk : 0, 2 * static_cast<int64_t>(nt) * kBlk,
      [&](int64_t s0, int, int buf) {
        const int st = static_cast<int>(s0 / kBlk);  // the step (< 2·nt): tile st, then st − nt
        const int k0 = (st < nt ? st : st - nt) * kBlk;
        const bf* vs = v_src + static_cast<int64_t>(k0) * kD;
        const std::uint32_t vd = v_dst + buf * kTile;
#pragma unroll
        for (int u = 0; u < kBlk / kVRowStep; ++u) {
          const bool ok = k0 + v_row + kVRowStep * u < Sp;
          mma16::cp_async16(vd + kVRowStep * 128 * u, ok ? vs + kVRowStep * kD * u : vsrc, ok);
        }
        const int n2 = 2 * (S - k0 < kBlk ? S - k0 : kBlk);  // the tile's bytes per row (n ≥ 1: k0 < S, Sp − S < 8)
#pragma unroll
        for (int u = 0; u < kPChunks; ++u) {
          if (pch[u] == 0 || plim[u] >= n2) continue;
          const std::uintptr_t ch = pch[u] + 2 * static_cast<std::uintptr_t>(k0);
          const std::uint32_t dst = pdst[u] + buf * kPStage;
          if (ch + 16 <= pend) {
            cp16(dst, reinterpret_cast<const void*>(ch));
          } else {  // the tensor's last chunk, past its end: the needed elements one at a time
            const std::uintptr_t A = ch - plim[u], e_end = A + n2;  // the row piece's first byte and end
            for (int e = 0; e < 16; e += 2)
              if (ch + e >= A && ch + e < e_end) {
                const unsigned short x = *reinterpret_cast<const unsigned short*>(ch + e);
                asm volatile("st.shared.u16 [%0], %1;" ::"r"(dst + e), "h"(x) : "memory");
              }
          }
        }
      },
      [&](int buf, int) {
        const int kt = step % nt;
        const bool second = step >= nt;
        ++step;
        const int k0 = kt * kBlk;
        float acc[8][4];
        mma16::zero(acc);
        fence_acc(acc);
        wgmma_fence();
        ss_k128(acc, dOk, dVk + static_cast<std::uint64_t>(buf) * (kTile >> 4));
        wgmma_commit();
        // P pairs while the products run, and their masks where the tile is partial or a row is padding
        std::uint32_t pp[2][8];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const std::uint32_t* wp = pr[h].w + buf * (kPStage / 4);
#pragma unroll
          for (int j = 0; j < 8; ++j) pp[h][j] = __byte_perm(wp[4 * j], wp[4 * j + 1], pr[h].sel);
        }
        if (__builtin_expect(rows_n[0] < k0 + kBlk || rows_n[1] < k0 + kBlk, 0)) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int lim = rows_n[h] - k0 - 2 * t;  // columns 8j + e of this lane's pairs are valid below lim
#pragma unroll
            for (int j = 0; j < 8; ++j)
              if (8 * j + 1 >= lim) pp[h][j] &= (8 * j < lim ? 0x0000FFFFu : 0u);
          }
        }
        wgmma_wait<0>();
        fence_acc(acc);
        if (!RO && !second) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              const std::uint32_t dp = pack(acc[j][2 * h], acc[j][2 * h + 1]);  // bf16 dP
              r[h] += lo16(pp[h][j]) * lo16(dp);
              r[h] += hi16(pp[h][j]) * hi16(dp);
            }
          if (kt == nt - 1)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              r[h] += __shfl_xor_sync(0xffffffffu, r[h], 1);
              r[h] += __shfl_xor_sync(0xffffffffu, r[h], 2);
            }
          return;
        }
        // pass 2: dS of this warp's 16 rows into its staging rows, then out as 16-byte pieces with P's copy
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const std::uint32_t dp = pack(acc[j][2 * h], acc[j][2 * h + 1]);
            const std::uint32_t x = pack(lo16(pp[h][j]) * (lo16(dp) - r[h]), hi16(pp[h][j]) * (hi16(dp) - r[h]));
            *reinterpret_cast<std::uint32_t*>(sDs + L::ds_at(g + 8 * h, j) + 2 * t) =
                pack(lo16(x) * scaling, hi16(x) * scaling);
          }
        __syncwarp();
        const int c = lane & 7, col = k0 + 8 * c;
        if (col < Sp) {
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            if (ds_at[u] == nullptr) continue;
            const int i = 16 * w + (lane >> 3) + 4 * u;
            *reinterpret_cast<uint4*>(ds_at[u] + k0) =
                *reinterpret_cast<const uint4*>(sDs + L::ds_at((lane >> 3) + 4 * u, c));
            if (pp_at[u] != nullptr) {
              uint4 v = make_uint4(0, 0, 0, 0);
              if (q0 + i < S) {
                const std::uint32_t* x = reinterpret_cast<const std::uint32_t*>(sP + buf * kPStage + pw_at[u]);
                const std::uint32_t sel = pw_sel[u];
                v = make_uint4(__byte_perm(x[0], x[1], sel), __byte_perm(x[1], x[2], sel), __byte_perm(x[2], x[3], sel),
                               __byte_perm(x[3], x[4], sel));
                if (col + 8 > S) {
                  bf* ve = reinterpret_cast<bf*>(&v);
#pragma unroll
                  for (int e = 0; e < 8; ++e)
                    if (col + e >= S) ve[e] = __ushort_as_bfloat16(static_cast<unsigned short>(0));
                }
              }
              *reinterpret_cast<uint4*>(pp_at[u] + k0) = v;
            }
          }
        }
        __syncwarp();  // read before the next tile's staging writes
      });
}

// ---- the dQ pass (ATTNBWD_CUDA_GQA_KVDQ; S % 128 == 0, no padding) ------------------------------------------------
// Per (b·h, 128 query rows), one pass over the head's 64-key tiles: dP = bf16(dO·Vᵀ) by wgmma (SS, as the dP +
// softmax kernel's), r = Σ P·dP in that kernel's pass-1 order, and X += (P⊙dP)·K, Y += P·K by wgmma with A =
// bf16(P⊙dP) and P straight from the accumulator's pairs (RS) and B = K's tile (N-major); at the end
// dQ = bf16(scaling·(X − r·Y)) = bf16(Σ_k scaling·P(dP − r)·K), one rounding of an fp32 sum (the reference rounds dS
// twice, then dQ), and r for the key-major kernel, which then needs no dSᵀ. A producer thread streams each tile's V,
// K (two 64-column halves each) and the CTA's 128 rows of P (one {64 keys, 64 rows} box per warpgroup, 128-byte
// swizzled) by TMA through kDqStages stages on mbarriers; two consumer warpgroups of 64 query rows each take them at
// their own pace (no CTA barrier per tile), each with its dO rows resident. A first form as a mode of the dP +
// softmax kernel (cp.async, a CTA barrier per tile) ran 1.00-1.02x against the dQ GEMM path, this one 1.06-1.10x
// (perf/NOTES.md, fifty-eighth session).

__global__ void __launch_bounds__(kWsThreads, 1)
    gqa_dq_ws_kernel(const __grid_constant__ CUtensorMap mV, const __grid_constant__ CUtensorMap mK,
                     const __grid_constant__ CUtensorMap mdO, const __grid_constant__ CUtensorMap mP,
                     const __grid_constant__ GqaDpSoftmax p, const int do_view) {
  const int S = static_cast<int>(p.S);
  const int bh = static_cast<int>(blockIdx.y), q0 = static_cast<int>(blockIdx.x) * 2 * kBlk;
  extern __shared__ float4 smem4[];
  std::uint8_t* base = align_smem_1024(smem4);
  std::uint8_t* sdO = base;
  std::uint8_t* stages = base + kDqOffStages;
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(base + kDqOffBar);
  std::uint64_t* empty = full + kDqStages;
  std::uint64_t* dobar = empty + kDqStages;
  const int nt = S / kBlk;
  init_ws_barriers<kDqStages>(full, empty, dobar);

  if (threadIdx.x < kWgThreads) {  // producer warpgroup: one thread issues every copy
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      const int row0 = bh * S;
      mbar_arrive_expect_tx(dobar, 2 * kTile);
#pragma unroll
      for (int w = 0; w < 2; ++w)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int c0, c1;
          do_coords(p.do_head, p.S, do_view != 0, bh, q0 + kBlk * w, h, c0, c1);
          tma_load_2d(sdO + w * kTile + h * kSub, &mdO, dobar, c0, c1);
        }
      int s = 0;
      std::uint32_t phase = 0;
      for (int kt = 0; kt < nt; ++kt) {
        mbar_wait(&empty[s], phase ^ 1);
        std::uint8_t* st = stages + s * kDqStage;
        mbar_arrive_expect_tx(&full[s], kDqStage);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          tma_load_2d(st + h * kSub, &mV, &full[s], 64 * h, row0 + kBlk * kt);
          tma_load_2d(st + kTile + h * kSub, &mK, &full[s], 64 * h, row0 + kBlk * kt);
          tma_load_2d(st + 2 * kTile + h * kSub, &mP, &full[s], kBlk * kt, row0 + q0 + kBlk * h);
        }
        if (++s == kDqStages) s = 0, phase ^= 1;
      }
    }
  } else {  // consumer warpgroups
    setmaxnreg_inc<232>();
    const int wgi = static_cast<int>(threadIdx.x) / kWgThreads - 1, ct = static_cast<int>(threadIdx.x) % kWgThreads;
    const int w = ct >> 5, lane = ct & 31, g = lane >> 2, t = lane & 3;
    const std::uint64_t dOk = kmajor(sdO + wgi * kTile, 0), dVk = kmajor(stages, 0), dKn = nmajor(stages + kTile, 0);
    // this lane's P pairs in a stage: rows 16w + g + 8h of the warpgroup's box, columns 8j + 2t (+1): 16-byte chunk j
    // stored at j ^ (row % 8) = j ^ g
    const std::uint8_t* p_lane = stages + 2 * kTile + wgi * kSub + (16 * w + g) * 128 + 4 * t;
    float xq[2][8][4], yq[2][8][4];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) mma16::zero(xq[hf]), mma16::zero(yq[hf]);
    float r[2] = {0.0f, 0.0f};
    mbar_wait(dobar, 0);
    int s = 0;
    std::uint32_t phase = 0;
    for (int kt = 0; kt < nt; ++kt) {
      mbar_wait(&full[s], phase);
      const std::uint64_t so = static_cast<std::uint64_t>(s) * (kDqStage >> 4);
      float acc[8][4];
      mma16::zero(acc);
      fence_acc(acc);
      wgmma_fence();
      ss_k128(acc, dOk, dVk + so);
      wgmma_commit();
      std::uint32_t pp[2][8];
      const std::uint8_t* pl = p_lane + s * kDqStage;
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 8; ++j)
          pp[h][j] = *reinterpret_cast<const std::uint32_t*>(pl + h * 8 * 128 + ((j ^ g) << 4));
      wgmma_wait<0>();
      fence_acc(acc);
      std::uint32_t ax[4][4], ap[4][4];
#pragma unroll
      for (int kc = 0; kc < 4; ++kc)
#pragma unroll
        for (int jj = 0; jj < 2; ++jj) {
          const int j = 2 * kc + jj;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const std::uint32_t pv = pp[h][j];
            const std::uint32_t dp = pack(acc[j][2 * h], acc[j][2 * h + 1]);  // bf16 dP
            r[h] += lo16(pv) * lo16(dp);
            r[h] += hi16(pv) * hi16(dp);
            ax[kc][2 * jj + h] = pack(lo16(pv) * lo16(dp), hi16(pv) * hi16(dp));
            ap[kc][2 * jj + h] = pv;
          }
        }
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) fence_acc(xq[hf]), fence_acc(yq[hf]);
      wgmma_fence();
      rs_n128(xq, ax, dKn + so);
      rs_n128(yq, ap, dKn + so);
      wgmma_commit();
      wgmma_wait<0>();
      fence_frag(ax);
      fence_frag(ap);
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) fence_acc(xq[hf]), fence_acc(yq[hf]);
      named_barrier(1 + wgi, kWgThreads);  // every warp of this warpgroup is done with stage s
      if (ct == 0) mbar_arrive(&empty[s]);
      if (++s == kDqStages) s = 0, phase ^= 1;
    }
    const float scaling = p.scaling;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r[h] += __shfl_xor_sync(0xffffffffu, r[h], 1);
      r[h] += __shfl_xor_sync(0xffffffffu, r[h], 2);
      const int q = q0 + kBlk * wgi + 16 * w + g + 8 * h;
      if (t == 0) p.r_out[bh * p.S + q] = r[h];
      bf* out = p.dQ + (bh * p.S + q) * kD + 2 * t;
#pragma unroll
      for (int hf = 0; hf < 2; ++hf)
#pragma unroll
        for (int j = 0; j < 8; ++j)
          *reinterpret_cast<std::uint32_t*>(out + 64 * hf + 8 * j) =
              pack(scaling * (xq[hf][j][2 * h] - r[h] * yq[hf][j][2 * h]),
                   scaling * (xq[hf][j][2 * h + 1] - r[h] * yq[hf][j][2 * h + 1]));
    }
  }
}

#else  // other passes of the fatbin: never launched there (the caller runs this on sm_90 devices only)

__global__ void gqa_kv_attn_kernel(const GqaKvAttn) { __trap(); }
__global__ void gqa_dq_ws_kernel(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                 const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                 const __grid_constant__ GqaDpSoftmax, const int) {
  __trap();
}
template <int WG, int CTAS, bool RO = false>
__global__ void gqa_dp_softmax_kernel(const GqaDpSoftmax) { __trap(); }
template <bool kDs>
__global__ void gqa_kv_attn_ws_kernel(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                      const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                      const __grid_constant__ CUtensorMap, const __grid_constant__ GqaKvAttn,
                                      const int) {
  __trap();
}


#endif

}  // namespace

std::string gqa_kv_attn_unsupported(const GqaKvAttn& p, int cc) {
  if (cc != 90) return "not an sm_90 device";
  if (p.D != kD) return "head_dim is not 128";
  if (p.S <= 0 || p.S % kBlk != 0) return "seq_len is not a multiple of 64";
  if (p.BH <= 0 || p.BH > 65535 || p.S / kBlk > 65535) return "too many heads or key blocks for the grid";
  if (!aligned16(p.dO) || !aligned16(p.Q) || !aligned16(p.V) || !aligned16(p.P) || !aligned16(p.r) ||
      !aligned16(p.dS_t) || !aligned16(p.dK) || !aligned16(p.dV) || p.do_ld % 8 != 0 || p.do_head % 8 != 0)
    return "tensors or dO rows not 16-byte aligned";
  return {};
}

void gqa_kv_attn_launch(const GqaKvAttn& p, cudaStream_t stream) {
  ATTNBWD_CUDA_CHECK(
      cudaFuncSetAttribute(gqa_kv_attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)));
  const dim3 grid(static_cast<unsigned>(p.S / kBlk), static_cast<unsigned>(p.BH));
  gqa_kv_attn_kernel<<<grid, kWgThreads, kSmem, stream>>>(p);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

namespace {
// dO as a head-split [BH·S, 128] tensor (otherwise the view of dA: rows of do_ld per query, heads side by side).
bool do_is_split(std::int64_t do_ld, std::int64_t do_head, std::int64_t S) { return do_ld == kD && do_head == S * kD; }
// dO as the view of dA: BH heads of do_head columns side by side in rows of do_ld.
bool do_is_view(std::int64_t BH, std::int64_t do_ld, std::int64_t do_head) {
  return BH * do_head <= do_ld && do_head % 8 == 0;
}
// The ws kernels' 128-byte-swizzled boxes of 64 × 64 bf16 over a row-major [rows][cols] tensor.
CUtensorMap map64(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
  return sm90::tensor_map(base, rows, cols, ld, 64, 64);
}
}  // namespace

std::string gqa_kv_attn_ws_unsupported(const GqaKvAttn& p, int cc) {
  const std::string why = gqa_kv_attn_unsupported(p, cc);
  if (!why.empty()) return why;
  if (p.S % (2 * kBlk) != 0) return "seq_len is not a multiple of 128";
  if (p.BH * p.S > INT32_MAX) return "too many rows for 32-bit TMA coordinates";
  if (!do_is_split(p.do_ld, p.do_head, p.S) && !do_is_view(p.BH, p.do_ld, p.do_head))
    return "dO is neither head-split nor a view of dA";
  return {};
}

void gqa_kv_attn_ws_launch(const GqaKvAttn& p, cudaStream_t stream) {
  const bool split = do_is_split(p.do_ld, p.do_head, p.S);
  const CUtensorMap mQ = map64(p.Q, p.BH * p.S, kD, kD), mV = map64(p.V, p.BH * p.S, kD, kD);
  const CUtensorMap mdO = split ? map64(p.dO, p.BH * p.S, kD, kD) : map64(p.dO, p.S, p.do_ld, p.do_ld);
  const CUtensorMap mP = map64(p.P, p.BH * p.S, p.S, p.S);
  // r [BH·S] fp32 as rows of 64 (one box per 64-query block)
  const CUtensorMap mR = sm90::tensor_map_2d_f32(p.r, kBlk, p.BH * p.S / kBlk, kBlk, kBlk, 1);
  const auto kern = p.dS_t != nullptr ? gqa_kv_attn_ws_kernel<true> : gqa_kv_attn_ws_kernel<false>;
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kern),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kWsSmem)));
  const dim3 grid(static_cast<unsigned>(p.S / (2 * kBlk)), static_cast<unsigned>(p.BH));
  kern<<<grid, kWsThreads, kWsSmem, stream>>>(mQ, mV, mdO, mP, mR, p, split ? 0 : 1);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

std::string gqa_dp_softmax_unsupported(const GqaDpSoftmax& p, int cc) {
  if (cc != 90) return "not an sm_90 device";
  if (p.D != kD) return "head_dim is not 128";
  if (p.S <= 0 || p.Sp != (p.S + 7) / 8 * 8)
    return "the attention buffers' rows are not S rounded up to 8 (S is not a multiple of 8 and the call is "
           "unpadded: ATTNBWD_CUDA_GQA_PAD=off, ATTNBWD_CUDA_GQA_PROJ=sm90, or q, k, v not 16-byte aligned)";
  if (p.ld_ds != p.Sp) return "dS rows are not Sp long";
  if (p.BH <= 0 || p.BH > 65535 || p.Sp > INT32_MAX / 2) return "too many heads or rows for the grid";
  if (!aligned16(p.dO) || !aligned16(p.V) || !aligned16(p.P) || !aligned16(p.dS) ||
      (p.Pp != nullptr && !aligned16(p.Pp)) || (p.O != nullptr && !aligned16(p.O)) || p.do_ld % 8 != 0 ||
      p.do_head % 8 != 0)
    return "tensors or dO rows not 16-byte aligned";
  if (p.dQ != nullptr) {  // the dQ pass (ATTNBWD_CUDA_GQA_KVDQ)
    if (p.Sp != p.S || p.S % (2 * kBlk) != 0) return "the dQ pass takes S a multiple of 128 (no padding)";
    if (p.Pp != nullptr || p.O != nullptr) return "the dQ pass takes no P copy and no O";
    if (p.K == nullptr || p.r_out == nullptr || !aligned16(p.K) || !aligned16(p.dQ) || !aligned16(p.r_out))
      return "K, dQ or r missing or not 16-byte aligned";
    if (p.BH * p.S > INT32_MAX) return "too many rows for 32-bit TMA coordinates";
    if (!do_is_split(p.do_ld, p.do_head, p.S) && !do_is_view(p.BH, p.do_ld, p.do_head))
      return "dO is neither head-split nor a view of dA";
  }
  return {};
}

namespace {
template <int WG>
std::int64_t dpsm_row_blocks(const GqaDpSoftmax& p) {  // the grid's x: blocks of kRows query rows per head
  return (p.Sp + DpsmLayout<WG>::kRows - 1) / DpsmLayout<WG>::kRows;
}
// The form's CTAs per SM: wide 1, narrow 2, narrow with three_ctas 3.
int dpsm_ctas_per_sm(const GqaDpSoftmax& p) {
  return p.wide ? DpsmLayout<2>::kCtasPerSm : p.three_ctas ? DpsmLayout<1, 3>::kCtasPerSm : DpsmLayout<1>::kCtasPerSm;
}
}  // namespace

bool gqa_dp_softmax_one_wave(const GqaDpSoftmax& p, int sms) {
  const std::int64_t blocks = p.wide ? dpsm_row_blocks<2>(p) : dpsm_row_blocks<1>(p);
  return blocks * p.BH <= static_cast<std::int64_t>(dpsm_ctas_per_sm(p)) * sms;
}

void gqa_dp_softmax_launch(const GqaDpSoftmax& p, cudaStream_t stream) {
  if (p.dQ != nullptr) {  // the dQ pass (ATTNBWD_CUDA_GQA_KVDQ), its own warp-specialised kernel
    const bool split = do_is_split(p.do_ld, p.do_head, p.S);
    const CUtensorMap mV = map64(p.V, p.BH * p.S, kD, kD), mK = map64(p.K, p.BH * p.S, kD, kD);
    const CUtensorMap mdO = split ? map64(p.dO, p.BH * p.S, kD, kD) : map64(p.dO, p.S, p.do_ld, p.do_ld);
    const CUtensorMap mP = map64(p.P, p.BH * p.S, p.S, p.S);
    ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(gqa_dq_ws_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(kDqSmem)));
    const dim3 grid(static_cast<unsigned>(p.S / (2 * kBlk)), static_cast<unsigned>(p.BH));
    gqa_dq_ws_kernel<<<grid, kWsThreads, kDqSmem, stream>>>(mV, mK, mdO, mP, p, split ? 0 : 1);
    ATTNBWD_CUDA_CHECK_LAUNCH();
    return;
  }
  const auto go = [&](auto wg, auto ctas) {
    constexpr int WG = decltype(wg)::value, CTAS = decltype(ctas)::value;
    using L = DpsmLayout<WG, CTAS>;
    const auto kern = p.O != nullptr ? gqa_dp_softmax_kernel<WG, CTAS, true> : gqa_dp_softmax_kernel<WG, CTAS>;
    const void* kernel = reinterpret_cast<const void*>(kern);
    ATTNBWD_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::kSmem)));
    if constexpr (CTAS == 3)  // the whole 228 KB as shared memory: three CTAs of 75 KB + 1 KB each
      ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                              static_cast<int>(cudaSharedmemCarveoutMaxShared)));
    const dim3 grid(static_cast<unsigned>(dpsm_row_blocks<WG>(p)), static_cast<unsigned>(p.BH));
    kern<<<grid, L::kThreads, L::kSmem, stream>>>(p);
  };
  if (p.wide)
    go(std::integral_constant<int, 2>{}, std::integral_constant<int, 1>{});
  else if (p.three_ctas)
    go(std::integral_constant<int, 1>{}, std::integral_constant<int, 3>{});
  else
    go(std::integral_constant<int, 1>{}, std::integral_constant<int, 2>{});
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
