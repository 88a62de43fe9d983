// gqa_rope_backward, steps 3-4 fused (spec §3): dS = bf16(bf16(P⊙(dP − r))·scaling) with
// dP = bf16(dO·Vᵀ) and r = Σ_keys P·dP, for head_dim 128, without materialising dP.
//
// One CTA per (b·Hq + h, 64 query rows): 4 warps, each owning 16 rows and every key, with two cp.async stages (the
// fused-dP form, and the small path's with ATTNBWD_CUDA_GQA_SMALL_SPLIT=off), or 8 warps, two per 16 rows, each
// taking one 32-key half of every tile, with four stages (the small path's default); a warp's dO rows as mma.sync A
// fragments in registers. Two sweeps over 64-key tiles: the first sums r (fp32, a fixed order: deterministic), the
// second recomputes the dP tile and writes dS. The V tile and the CTA's 64 × 64 P tile stream through the cp.async
// stages (P's rows keep their 16-byte phase: any S, any alignment).
// Tensor cores through mma.sync.m16n8k16 (bf16 in, fp32 accumulate): valid on sm_90a and sm_100a.
// Tails: rows and keys past S read as zero (or are multiplied by zero) and are never written.
//
// The small-S attention path (gqa_small_attn; auto where S ≤ 160 and T ≤ 256) is two launches of this file's kernels
// instead of padding copies, five GEMMs and the row kernel: the same kernel with kDq (the second sweep also stages
// the K tile and accumulates dQ = dS·K from dS's registers, one rounding at the end) in an 8-warp form (kSplit = 2:
// each 16-row group's keys split in two halves between two warps, four stages; ATTNBWD_CUDA_GQA_SMALL_SPLIT=off: the
// 4-warp form), then small_dkdv_kernel, key-major: CTA = (b·Hq + h, 64 keys), each warp 16 keys, dV₃₂ = Pᵀ·dO and
// dK₃₂ = dSᵀ·Q over 32-query tiles of P, dS, dO and Q streamed through three cp.async stages (the transposed operands
// by ldmatrix.trans, Pᵀ element-wise from its phase-kept tile), fp32 accumulators, one rounding each. It is a
// programmatic dependent of the first: dV (P and dO only) before its griddepcontrol.wait, dK after it. Merged
// (GqaSmallAttn::merged, opt-in: ATTNBWD_CUDA_GQA_MERGE=fused): the first kernel stores dQ's RoPE backward into the
// merged [T, (Hq + 2·Hkv)·128] buffer, and the second runs in clusters of the G query heads of a KV head, which sum
// their rounded dK₃₂ and dV₃₂ through distributed shared memory in head order and store dK's RoPE backward and dV
// there: no merge pass (slower on an H200 all the same: perf/NOTES.md, twenty-sixth session). Both kernels are bound
// by latency (instruction chains and tile loads) on grids of (⌈S/64⌉, B·Hq) CTAs: the path wins only at small S.
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "cluster.cuh"
#include "gqa_rope_backward_attn.hpp"
#include "gqa_rope_pair.cuh"
#include "griddep.cuh"
#include "mma_fp16.cuh"

#include "gqa_rope_small_tiles.cuh"

namespace attnbwd::cuda {
namespace {

// The merged epilogues' output (GqaSmallAttn::merged): out [T, ldo] with the q columns of head h at h·128, the k
// columns of KV head j at (Hq + j)·128 and the v columns at (Hq + Hkv + j)·128; cos, sin [T, 128]; token t = b·S + s.
struct MergeOut {
  bf* out;
  int64_t ldo;
  const bf* cos;
  const bf* sin;
  int Hq, Hkv;
};

// Both elements rounded to bf16, back as floats (one cvt.rn.bf16x2.f32).
__device__ __forceinline__ float2 round2(float x, float y) { return __bfloat1622float2(__floats2bfloat162_rn(x, y)); }
__device__ __forceinline__ std::uint32_t bits2(__nv_bfloat162 x) { return *reinterpret_cast<std::uint32_t*>(&x); }

// Shared memory of dp_softmax_kernel: kDpStages stages of the V tile (64 keys × kStride), the CTA's P tile (64 rows
// × kPStride) and with kDq the K tile: 44 KB per stage with kDq; two stages for the 4-warp form (two CTAs per SM), four
// for the 8-warp form (one CTA per SM by its registers; the tiles' load latency, not the products, bounds it with two).
template <int kSplit>
constexpr int kDpStages = kSplit == 2 ? 4 : 2;
constexpr int kKeyTile = kKeys * kStride;  // elements
constexpr int kPTile = kRows * kPStride;   // elements
template <bool kDq>
constexpr int kDpStage = (kDq ? 2 * kKeyTile : kKeyTile) + kPTile;  // elements per stage: V, P[, K]
template <bool kDq, int kSplit = 1>
constexpr std::size_t dp_smem_bytes() {
  return static_cast<std::size_t>(kDpStages<kSplit>) * kDpStage<kDq> * sizeof(bf);
}

// dO(bh, q, :) = dO + bh·do_head + q·do_ld. kDq: also K [BH, S, 128] and dQ [BH, S, 128] (dQ = dS·K). P: [BH, S, S].
// The two sweeps are one stream of 2n key tiles (n = ⌈S / 64⌉; tile i < n: sweep 1, V and P; i ≥ n: sweep 2, V, P
// and with kDq K) through kDpStages<kSplit> cp.async stages.
// kMerge (with kDq): dQ's RoPE backward into mo.out instead of dQ.
// kRo (with kDq; the small path with ATTNBWD_CUDA_GQA_PV=side): r = Σ_d dO·O from O = bf16(P·V) [BH, S, 128], computed
// by the op beside its dA GEMM (Σ_k P·dP reassociated, as the key-major path's r), instead of sweep 1: the stream is
// sweep 2's n tiles only.
// kSplit = 2 (the small path's form): 8 warps, warp w takes rows 16·(w % 4) .. + 16 and keys 32·(w / 4) .. + 32 of
// every 64-key tile — half the products and element work per warp of the 4-warp form (kSplit = 1) on the same tiles,
// twice the warps to hide their latency; r and dQ are summed over the two halves through shared memory (half 0's
// sum + half 1's: a fixed order, deterministic).
// At most 168 registers: an 8-warp CTA (43 K registers) or two 4-warp CTAs beside a small_dkdv_kernel CTA (16 K at its
// 128 registers; 21.5 K at 168 in the merged form) on one SM, so that the second launch's first pass runs under this
// kernel's tail.
template <bool kDq, bool kMerge = false, int kSplit = 1, bool kRo = false>
__global__ void __maxnreg__(168) dp_softmax_kernel(const bf* __restrict__ dO, int64_t do_ld, int64_t do_head,
                                                              const bf* __restrict__ V, const bf* __restrict__ P,
                                                              bf* __restrict__ dS, int64_t S, int64_t ld, float scaling,
                                                              const bf* __restrict__ K, bf* __restrict__ dQ,
                                                              int64_t BH, MergeOut mo, const bf* __restrict__ O,
                                                              bool trigger_late) {
  static_assert(kDq || !kMerge, "the merged epilogue writes dQ");
  static_assert(kDq || !kRo, "r from O is the small path's form");
  static_assert(kSplit == 1 || kSplit == 2, "one or two key halves");
  constexpr int kNT = 8 / kSplit;             // 8-key groups per warp and tile
  constexpr int kNThreads = kThreads * kSplit;
  constexpr int kTpr = 2 * kSplit;            // threads per row of the P tile
  extern __shared__ __align__(16) unsigned char dp_smem[];
  bf* const sm = reinterpret_cast<bf*>(dp_smem);
  __shared__ float r_half[kSplit == 2 ? 2 * kRows : 1];  // sweep 1's r per (key half, row)
  // small_dkdv_kernel may queue: here, or with trigger_late after sweep 1 (with kRo: after r), so that work queued on
  // another stream meanwhile takes the SMs this grid leaves empty first (ATTNBWD_CUDA_GQA_SMALL_PDL=late)
  if constexpr (kDq)
    if (!trigger_late) griddep_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int rw = warp % 4, half = warp / 4;  // the warp's 16-row group and key half (0 with kSplit = 1)
  const int kofs = half * (kKeys / kSplit);  // its first key in a tile
  const int64_t bh = blockIdx.y;
  const int64_t qc = static_cast<int64_t>(blockIdx.x) * kRows;  // the CTA's first row
  const int rows = static_cast<int>(S - qc < kRows ? S - qc : kRows);
  const bf* v = V + bh * S * kD;
  const bf* kh = kDq ? K + bh * S * kD : nullptr;
  const bf* p = P + bh * S * S;
  const bf* pend = P + BH * S * S;
  bf* ds = dS + bh * S * ld;
  const int64_t n = (S + kKeys - 1) / kKeys;  // key tiles per sweep

  // This thread's row of the P tile (kTpr threads per row) and its source less the phase.
  const int p_row = static_cast<int>(threadIdx.x) / kTpr;
  const bool p_valid = p_row < rows;
  const bf* p_src = p_valid ? p + (qc + p_row) * S : p;
  p_src -= p_shift(p_src);
  const auto issue = [&](int64_t r0, int, int buf) {
    const int64_t tile = r0 / kKeys, k0 = (tile < n ? tile : tile - n) * kKeys;
    bf* st = sm + buf * kDpStage<kDq>;
    issue_rows<kKeys, kNThreads>(st, v, kD, S, k0);
    issue_p_row<kTpr>(st + kKeyTile + p_row * kPStride, p_src + k0, p_valid, P, pend,
                      static_cast<int>(threadIdx.x) % kTpr);
    if constexpr (kDq)
      if (tile >= n) issue_rows<kKeys, kNThreads>(st + kKeyTile + kPTile, kh, kD, S, k0);
  };

  // A fragments: rows q0+g (regs 0, 2) and q0+g+8 (regs 1, 3); columns 16ks+2t (+8 for regs 2, 3).
  const int rl = rw * 16 + g;  // this lane's first row in the CTA's tile (the second: rl + 8)
  const int64_t qa = qc + rl, qb = qa + 8;
  const bool va = qa < S, vb = qb < S;
  std::uint32_t a[8][4];
  {
    const bf* oa = dO + bh * do_head + qa * do_ld;
    const bf* ob = dO + bh * do_head + qb * do_ld;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int col = ks * 16 + 2 * t;
      a[ks][0] = va ? *reinterpret_cast<const std::uint32_t*>(oa + col) : 0u;
      a[ks][1] = vb ? *reinterpret_cast<const std::uint32_t*>(ob + col) : 0u;
      a[ks][2] = va ? *reinterpret_cast<const std::uint32_t*>(oa + col + 8) : 0u;
      a[ks][3] = vb ? *reinterpret_cast<const std::uint32_t*>(ob + col + 8) : 0u;
    }
  }
  // This lane's P elements in a tile: rows rl, rl + 8 at their phases, keys kofs + 8·nt + 2t and + 1.
  const int pa_off = kKeyTile + rl * kPStride + p_shift(p + qa * S) + kofs + 2 * t;
  const int pb_off = kKeyTile + (rl + 8) * kPStride + p_shift(p + qb * S) + kofs + 2 * t;
  const auto p_at = [](const bf* st, int off) { return __bfloat162float(st[off]); };
  // dQ's B fragments (ldmatrix.trans of the K tile): matrix m = (keys 16·kk + 8·(m % 2), dims 8·(j + m / 2)).
  const int k_off = kKeyTile + kPTile + (kofs + (lane / 8) % 2 * 8 + lane % 8) * kStride + (lane / 16) * 8;

  float ra = 0.0f, rb = 0.0f;  // r for rows qa, qb (this lane's share until sweep 2, then the quad's)
  if constexpr (kRo) {
    // r = Σ_d dO·O over this lane's 32 columns of rows qa and qb (those of its dO fragments), then over the quad: a
    // fixed order (both key halves of the 8-warp form compute the same sums, so no exchange).
    const bf* oa = O + (bh * S + qa) * kD;
    const bf* ob = O + (bh * S + qb) * kD;
    const auto dot2 = [](std::uint32_t d, const bf* o) {
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&d));
      const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(o));
      return x.x * y.x + x.y * y.y;
    };
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int col = ks * 16 + 2 * t;
      if (va) ra += dot2(a[ks][0], oa + col) + dot2(a[ks][2], oa + col + 8);
      if (vb) rb += dot2(a[ks][1], ob + col) + dot2(a[ks][3], ob + col + 8);
    }
    ra += __shfl_xor_sync(0xffffffffu, ra, 1);
    ra += __shfl_xor_sync(0xffffffffu, ra, 2);
    rb += __shfl_xor_sync(0xffffffffu, rb, 1);
    rb += __shfl_xor_sync(0xffffffffu, rb, 2);
    if (trigger_late) griddep_launch_dependents();
  }
  float acc[kNT][4];
  float dq[kDq ? 16 : 1][4];
  if constexpr (kDq) {
#pragma unroll
    for (int j = 0; j < 16; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
  }
  int64_t tile = kRo ? n : 0;
  mma16::stream_blocks_deep<kKeys, kDpStages<kSplit>>(kRo ? n * kKeys : 0, 2 * n * kKeys, issue, [&](int buf, int) {
    const bf* st = sm + buf * kDpStage<kDq>;
    dp_tile<kNT>(acc, a, st + kofs * kStride, lane);
    if (!kRo && tile < n) {
      // Sweep 1. Keys past S: dP is exactly 0 there (V's rows zero), so their P values (the next row's) add 0;
      // rows past S: P and dO zero.
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const float2 da = round2(acc[nt][0], acc[nt][1]), db = round2(acc[nt][2], acc[nt][3]);
        ra += p_at(st, pa_off + 8 * nt) * da.x + p_at(st, pa_off + 8 * nt + 1) * da.y;
        rb += p_at(st, pb_off + 8 * nt) * db.x + p_at(st, pb_off + 8 * nt + 1) * db.y;
      }
      if (++tile == n) {  // the quad's sums (and with two halves, published for the pair's other warp)
        ra += __shfl_xor_sync(0xffffffffu, ra, 1);
        ra += __shfl_xor_sync(0xffffffffu, ra, 2);
        rb += __shfl_xor_sync(0xffffffffu, rb, 1);
        rb += __shfl_xor_sync(0xffffffffu, rb, 2);
        if constexpr (kSplit == 2)
          if (t == 0) r_half[half * kRows + rl] = ra, r_half[half * kRows + rl + 8] = rb;
        if constexpr (kDq)
          if (trigger_late) griddep_launch_dependents();
      }
      return;
    }
    if constexpr (kSplit == 2 && !kRo)
      if (tile == n) {  // after the stream's barrier: both halves' sums, half 0's first
        ra = r_half[rl] + r_half[kRows + rl];
        rb = r_half[rl + 8] + r_half[kRows + rl + 8];
      }
    // Sweep 2: dS = bf16(bf16(P·(bf16(dP) − r))·scaling) (and with kDq dQ += dS·K_tile from the rounded dS values;
    // keys past S and rows past S zero).
    const int64_t k0 = (tile - n) * kKeys;
    const bool full = k0 + kKeys <= S;
    std::uint32_t sa[kNT][2];  // the dS values of this lane's pairs (zero where not written)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int64_t key = k0 + kofs + nt * 8 + 2 * t;
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const bool valid = rh == 0 ? va : vb;
        const float r = rh == 0 ? ra : rb;
        const int off = (rh == 0 ? pa_off : pb_off) + 8 * nt;
        const float2 d = round2(acc[nt][2 * rh], acc[nt][2 * rh + 1]);
        const float2 x = round2(p_at(st, off) * (d.x - r), p_at(st, off + 1) * (d.y - r));
        const __nv_bfloat162 out = __floats2bfloat162_rn(x.x * scaling, x.y * scaling);
        bf* dst = ds + (rh == 0 ? qa : qb) * ld + key;  // ld and key even: 4-byte aligned
        std::uint32_t w = valid ? bits2(out) : 0u;
        if (full) {  // a tile-uniform test first: full tiles take no per-key one (the same store as below)
          if (valid) *reinterpret_cast<__nv_bfloat162*>(dst) = out;
        } else if (key + 1 < S) {
          if (valid) *reinterpret_cast<__nv_bfloat162*>(dst) = out;
        } else if (key < S) {
          if (valid) *dst = out.x;
          w &= 0xffffu;
        } else {
          w = 0u;
        }
        sa[nt][rh] = w;
      }
    }
    if constexpr (kDq) {
      // dQ += dS (16 rows × this warp's 64 / kSplit keys: A fragments from the C layout) · K_tile (those keys × 128;
      // B by ldmatrix.trans).
#pragma unroll
      for (int kk = 0; kk < kNT / 2; ++kk) {
        const std::uint32_t af[4] = {sa[2 * kk][0], sa[2 * kk][1], sa[2 * kk + 1][0], sa[2 * kk + 1][1]};
        mma_b_tile(dq, af, st + k_off + 16 * kk * kStride);
      }
    }
    ++tile;
  });
  if constexpr (kDq && kSplit == 2) {
    // dQ over both key halves: half 1's partial through shared memory (the ring's, free after the stream's last
    // barrier: 4 row groups × 64 floats × 32 lanes), added to half 0's, which stores the result.
    static_assert(4 * 64 * 32 * sizeof(float) <= kDpStages<kSplit> * kDpStage<kDq> * sizeof(bf),
                  "the partials fit in the ring");
    float* red = reinterpret_cast<float*>(dp_smem) + rw * 64 * 32 + lane;
    if (half == 1) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) red[(4 * j + e) * 32] = dq[j][e];
    }
    __syncthreads();
    if (half == 1) return;  // (no barrier below)
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[j][e] += red[(4 * j + e) * 32];
  }
  if constexpr (kMerge) {
    // dQ rounded to bf16 (the value the merge pass reads), then the RoPE backward of the pairs (d, d + 64), both in
    // this lane (j and j + 8), into out[t, h·128 + d]: the merge pass's math in its order.
    const int64_t b = bh / mo.Hq, h = bh - b * mo.Hq;
    const auto ld2 = [](const bf* x) { return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x)); };
#pragma unroll
    for (int rh = 0; rh < 2; ++rh) {
      const int64_t q = rh == 0 ? qa : qb;
      if (!(rh == 0 ? va : vb)) continue;
      const int64_t tok = b * S + q;
      bf* o = mo.out + tok * mo.ldo + h * kD;
      const bf* cs = mo.cos + tok * kD;
      const bf* sn = mo.sin + tok * kD;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int d = 8 * j + 2 * t;
        const float2 g0 = round2(dq[j][2 * rh], dq[j][2 * rh + 1]);
        const float2 g1 = round2(dq[j + 8][2 * rh], dq[j + 8][2 * rh + 1]);
        const float2 c0 = ld2(cs + d), c1 = ld2(cs + d + 64), s0 = ld2(sn + d), s1 = ld2(sn + d + 64);
        bf x0, x1, y0, y1;  // columns d, d + 1 and d + 64, d + 65
        rope_pair(g0.x, g1.x, c0.x, c1.x, s0.x, s1.x, x0, y0);
        rope_pair(g0.y, g1.y, c0.y, c1.y, s0.y, s1.y, x1, y1);
        *reinterpret_cast<__nv_bfloat162*>(o + d) = __halves2bfloat162(x0, x1);
        *reinterpret_cast<__nv_bfloat162*>(o + d + 64) = __halves2bfloat162(y0, y1);
      }
    }
  } else if constexpr (kDq) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if (va)
        *reinterpret_cast<__nv_bfloat162*>(dQ + (bh * S + qa) * kD + 8 * j + 2 * t) =
            __floats2bfloat162_rn(dq[j][0], dq[j][1]);
      if (vb)
        *reinterpret_cast<__nv_bfloat162*>(dQ + (bh * S + qb) * kD + 8 * j + 2 * t) =
            __floats2bfloat162_rn(dq[j][2], dq[j][3]);
    }
  }
}

// dV₃₂ = Pᵀ·dO and dK₃₂ = dSᵀ·Q for keys [64·blockIdx.x, +64) of head bh = blockIdx.y (one rounding each), in two
// passes over 32-query tiles streamed through kKvStages cp.async stages (40 KB: a CTA fits beside two of the
// primary's 4-warp form, or one beside its 8-warp form at ≤ 168 registers each): P and dO before griddepcontrol.wait
// (dV under the primary's tail), then dS and Q.
constexpr int kBq = 32;  // query rows per tile
constexpr int kKvStages = 3;
constexpr int kKvStage = kBq * kPStride + kBq * kStride;  // elements: P then dS; dO then Q
constexpr std::size_t kKvSmem = static_cast<std::size_t>(kKvStages) * kKvStage * sizeof(bf);

// The merged epilogue of small_dkdv_kernel<G>: this CTA's dK₃₂ and dV₃₂ (keys [k0, k0 + 64) of query head bh, fp32 in
// the C layout: this lane's keys 16·warp + g and + 8, columns 8j + 2t and + 1) rounded into shared memory (the ring's,
// free after its last barrier) as [64 keys][kStride]; after a cluster barrier, CTA rank r of the cluster (query head
// j·G + r of KV head j) sums keys [r·64/G, (r + 1)·64/G) over the G CTAs in head order, 8 columns d0.. and d0 + 64..
// per thread, as the merge pass does (fp32 from 0, one rounding; dK: RoPE backward of the rounded sum). A second
// cluster barrier keeps every CTA's shared memory until the others have read it.
template <int G>
__device__ __forceinline__ void merge_kv(const float (&dk)[16][4], const float (&dv)[16][4], bf* sm, int64_t bh,
                                         int64_t k0, int64_t S, const MergeOut& mo) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  static_assert(2 * kKeys * kStride * sizeof(bf) <= kKvSmem, "dK and dV of the block fit in the ring's shared memory");
  bf* const sk = sm;
  bf* const sv = sm + kKeys * kStride;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int c = 8 * j + 2 * t, ra = (16 * warp + g) * kStride, rb = ra + 8 * kStride;
    *reinterpret_cast<__nv_bfloat162*>(sk + ra + c) = __floats2bfloat162_rn(dk[j][0], dk[j][1]);
    *reinterpret_cast<__nv_bfloat162*>(sk + rb + c) = __floats2bfloat162_rn(dk[j][2], dk[j][3]);
    *reinterpret_cast<__nv_bfloat162*>(sv + ra + c) = __floats2bfloat162_rn(dv[j][0], dv[j][1]);
    *reinterpret_cast<__nv_bfloat162*>(sv + rb + c) = __floats2bfloat162_rn(dv[j][2], dv[j][3]);
  }
  cluster_sync();
  constexpr int kPerCta = kKeys / G;  // keys summed by each CTA of the cluster
  const int rank = static_cast<int>(cluster_rank());  // = bh % G: the cluster spans G consecutive heads along y
  const int64_t b = bh / mo.Hq, kvh = (bh - b * mo.Hq) / G;
  const auto unpack = [](const uint4& u, float (&x)[8]) {
    const bf* e = reinterpret_cast<const bf*>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = __bfloat162float(e[i]);
  };
  const auto to_u4 = [](const bf (&x)[8]) { return *reinterpret_cast<const uint4*>(x); };
#pragma unroll
  for (int item = static_cast<int>(threadIdx.x); item < kPerCta * 8; item += kThreads) {
    const int key = rank * kPerCta + item / 8, d0 = (item % 8) * 8;
    const int64_t s = k0 + key;
    if (s >= S) continue;
    uint4 raw[G][4];  // per head: k at d0, k at d0 + 64, v at d0, v at d0 + 64 (every load in flight at once)
    const int off = key * kStride + d0;
#pragma unroll
    for (int r = 0; r < G; ++r) {
      const std::uint32_t ak = cluster_map(sk + off, static_cast<unsigned>(r));
      const std::uint32_t av = cluster_map(sv + off, static_cast<unsigned>(r));
      raw[r][0] = cluster_ld16(ak);
      raw[r][1] = cluster_ld16(ak + 64 * sizeof(bf));
      raw[r][2] = cluster_ld16(av);
      raw[r][3] = cluster_ld16(av + 64 * sizeof(bf));
    }
    float k0s[8] = {}, k1s[8] = {}, v0s[8] = {}, v1s[8] = {};
#pragma unroll
    for (int r = 0; r < G; ++r) {
      float x[4][8];
#pragma unroll
      for (int u = 0; u < 4; ++u) unpack(raw[r][u], x[u]);
#pragma unroll
      for (int i = 0; i < 8; ++i) k0s[i] += x[0][i], k1s[i] += x[1][i], v0s[i] += x[2][i], v1s[i] += x[3][i];
    }
    const int64_t tok = static_cast<int64_t>(b) * S + s;
    bf* o = mo.out + tok * mo.ldo + static_cast<int64_t>(mo.Hq) * kD + kvh * kD + d0;
    float c0[8], c1[8], s0[8], s1[8];
    unpack(*reinterpret_cast<const uint4*>(mo.cos + tok * kD + d0), c0);
    unpack(*reinterpret_cast<const uint4*>(mo.cos + tok * kD + d0 + 64), c1);
    unpack(*reinterpret_cast<const uint4*>(mo.sin + tok * kD + d0), s0);
    unpack(*reinterpret_cast<const uint4*>(mo.sin + tok * kD + d0 + 64), s1);
    bf ko0[8], ko1[8], vo0[8], vo1[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float g0 = __bfloat162float(__float2bfloat16_rn(k0s[i])), g1 = __bfloat162float(__float2bfloat16_rn(k1s[i]));
      rope_pair(g0, g1, c0[i], c1[i], s0[i], s1[i], ko0[i], ko1[i]);
      vo0[i] = __float2bfloat16_rn(v0s[i]);
      vo1[i] = __float2bfloat16_rn(v1s[i]);
    }
    bf* ov = o + static_cast<int64_t>(mo.Hkv) * kD;
    *reinterpret_cast<uint4*>(o) = to_u4(ko0);
    *reinterpret_cast<uint4*>(o + 64) = to_u4(ko1);
    *reinterpret_cast<uint4*>(ov) = to_u4(vo0);
    *reinterpret_cast<uint4*>(ov + 64) = to_u4(vo1);
  }
  cluster_sync();
}

// kG > 0: the merged epilogue (launched in clusters of kG = Hq / Hkv CTAs along y, the query heads of one KV head):
// dK₃₂ and dV₃₂ rounded into shared memory, then each CTA of the cluster sums 64 / kG of the block's keys over the
// group's CTAs (fp32, head order, one rounding) and writes dK's RoPE backward and dV into mo.out.
template <int kG>
__global__ void __maxnreg__(kG == 0 ? 128 : 168) small_dkdv_kernel(const bf* __restrict__ P, const bf* __restrict__ dS,
                                                              int64_t ld, const bf* __restrict__ dO, int64_t do_ld,
                                                              int64_t do_head, const bf* __restrict__ Q,
                                                              bf* __restrict__ dK, bf* __restrict__ dV, int64_t S,
                                                              int64_t BH, MergeOut mo) {
  static_assert(kG == 0 || kG == 1 || kG == 2 || kG == 4 || kG == 8, "clusters of 1, 2, 4 or 8 CTAs");
  extern __shared__ __align__(16) unsigned char kv_smem[];
  bf* const sm = reinterpret_cast<bf*>(kv_smem);
  // Merged: the next launch (the thin q/k/v kernel, a programmatic dependent) may start its prologue; it waits for
  // this grid before reading out.
  if constexpr (kG > 0) griddep_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, m = lane / 8;
  const int64_t bh = blockIdx.y, k0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const bf* p = P + bh * S * S;
  const bf* pend = P + BH * S * S;
  const bf* ds = dS + bh * S * ld;
  const bf* o = dO + bh * do_head;
  const bf* q = Q + bh * S * kD;
  // This thread's row of the P tile (four threads per row): row q0 + p_row starts at p_base + q0·S (its phase: fixed).
  const int p_row = static_cast<int>(threadIdx.x) / 4;
  const bf* p_base = p + p_row * S + k0;
  p_base -= p_shift(p_base);
  // dS: this thread's chunk (i % 8) of rows i / 8 and + 16; ld % 8 == 0, so a chunk starting before S ends in the row.
  const int s_row = static_cast<int>(threadIdx.x) / 8, s_col = (static_cast<int>(threadIdx.x) % 8) * 8;
  const bool s_in = k0 + s_col < S;
  const int key_a = 16 * warp + g;  // this lane's keys in the tile: key_a, key_a + 8
  const int64_t ka = k0 + key_a, kb = ka + 8;
  // acc (this lane's part of a 64 × 128 fp32 block of keys [k0, k0 + 64)) rounded into out [BH, S, 128].
  const auto store = [&](float (&acc)[16][4], bf* out) {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const int64_t col = 8 * j + 2 * t;
      if (ka < S)
        *reinterpret_cast<__nv_bfloat162*>(out + (bh * S + ka) * kD + col) = __floats2bfloat162_rn(acc[j][0], acc[j][1]);
      if (kb < S)
        *reinterpret_cast<__nv_bfloat162*>(out + (bh * S + kb) * kD + col) = __floats2bfloat162_rn(acc[j][2], acc[j][3]);
    }
  };
  const auto h16 = [](const bf* st, int off) { return static_cast<std::uint32_t>(__bfloat16_as_ushort(st[off])); };
  // (mma_b_tile: acc += A (16 keys × 16 queries) · B (16 queries × 128 dims of the dO or Q tile at b).)
  // dO and Q by ldmatrix.trans: matrix m = (queries 16·kq + 8·(m % 2), dims 8·(j + m / 2)).
  const int o_off = kBq * kPStride + ((m % 2) * 8 + lane % 8) * kStride + 8 * (m / 2);

  // Pass 1, before the wait (P and dO are the previous kernels' inputs, complete when the primary started): dV₃₂ =
  // Pᵀ·dO, overlapping the primary's tail where both kernels' CTAs fit on an SM. Merged, dV stays in registers.
  float dv[16][4];
  {
    const auto issue = [&](int64_t q0, int rows, int buf) {
      bf* st = sm + buf * kKvStage;
      issue_p_row<4>(st + p_row * kPStride, p_row < rows ? p_base + q0 * S : P, p_row < rows, P, pend,
                     static_cast<int>(threadIdx.x) % 4);
      issue_rows<kBq>(st + kBq * kPStride, o, do_ld, S, q0);
    };
#pragma unroll
    for (int j = 0; j < 16; ++j) dv[j][0] = dv[j][1] = dv[j][2] = dv[j][3] = 0.0f;
    // Pᵀ's A fragments element by element: tile rows 16·kq + 2t (+ 8) and 16·kq + 2t + 1 (+ 8) at their phases.
    const int pe_off = 2 * t * kPStride + p_shift(p + 2 * t * S) + key_a;
    const int po_off = (2 * t + 1) * kPStride + p_shift(p + (2 * t + 1) * S) + key_a;
    mma16::stream_blocks_deep<kBq, kKvStages>(0, S, issue, [&](int buf, int) {
      const bf* st = sm + buf * kKvStage;
#pragma unroll
      for (int kq = 0; kq < kBq / 16; ++kq) {
        std::uint32_t ap[4];
        const int r = 16 * kq * kPStride;
        ap[0] = h16(st, pe_off + r) | h16(st, po_off + r) << 16;
        ap[1] = h16(st, pe_off + r + 8) | h16(st, po_off + r + 8) << 16;
        ap[2] = h16(st, pe_off + r + 8 * kPStride) | h16(st, po_off + r + 8 * kPStride) << 16;
        ap[3] = h16(st, pe_off + r + 8 * kPStride + 8) | h16(st, po_off + r + 8 * kPStride + 8) << 16;
        mma_b_tile(dv, ap, st + o_off + 16 * kq * kStride);
      }
    });
    if constexpr (kG == 0) store(dv, dV);
  }

  // Pass 2: dK₃₂ = dSᵀ·Q once the primary's dS is complete.
  griddep_wait();
  {
    const auto issue = [&](int64_t q0, int rows, int buf) {
      bf* dss = sm + buf * kKvStage;
      const bf* s_src = ds + (q0 + s_row) * ld + k0 + s_col;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const bool valid = s_row + 16 * u < rows && s_in;
        mma16::cp_async16(dss + (s_row + 16 * u) * kPStride + s_col, valid ? s_src + 16 * u * ld : ds, valid);
      }
      issue_rows<kBq>(dss + kBq * kPStride, q, kD, S, q0);
    };
    float dk[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) dk[j][0] = dk[j][1] = dk[j][2] = dk[j][3] = 0.0f;
    // dSᵀ by ldmatrix.trans: matrix m = (queries 16·kq + 8·(m / 2), keys 16·warp + 8·(m % 2)).
    const int s_off = ((m / 2) * 8 + lane % 8) * kPStride + 16 * warp + (m % 2) * 8;
    mma16::stream_blocks_deep<kBq, kKvStages>(0, S, issue, [&](int buf, int) {
      const bf* st = sm + buf * kKvStage;
#pragma unroll
      for (int kq = 0; kq < kBq / 16; ++kq) {
        std::uint32_t as[4];
        mma16::ldsm4_trans(as, mma16::smem_u32(st + s_off + 16 * kq * kPStride));
        mma_b_tile(dk, as, st + o_off + 16 * kq * kStride);
      }
    });
    if constexpr (kG == 0) {
      store(dk, dK);
    } else {
      merge_kv<kG>(dk, dv, sm, bh, k0, S, mo);
    }
  }
}

}  // namespace

// Called by gqa_rope_backward.cu where ATTNBWD_GQA_FUSED=1 asks for it. dO, V: [BH, S, 128]; P: [BH, S, S];
// dS: [BH, S, ld], ld even. Returns false (nothing enqueued) where this kernel does not apply.
bool fused_dp_softmax(const bf* dO, const bf* V, const bf* P, bf* dS, int64_t BH, int64_t S, int64_t D, int64_t ld,
                      float scaling, cudaStream_t stream) {
  if (D != kD || ld % 2 != 0 || BH > 65535 || (S + kRows - 1) / kRows > 2147483647) return false;
  if (reinterpret_cast<std::uintptr_t>(V) % 16 != 0 || reinterpret_cast<std::uintptr_t>(dO) % 4 != 0 ||
      reinterpret_cast<std::uintptr_t>(dS) % 4 != 0)
    return false;
  const dim3 grid(static_cast<unsigned>((S + kRows - 1) / kRows), static_cast<unsigned>(BH));
  constexpr std::size_t smem = dp_smem_bytes<false>();
  ATTNBWD_CUDA_CHECK(
      cudaFuncSetAttribute(dp_softmax_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  dp_softmax_kernel<false><<<grid, kThreads, smem, stream>>>(dO, kD, S * kD, V, P, dS, S, ld, scaling, nullptr, nullptr,
                                                             BH, MergeOut{}, nullptr, false);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  return true;
}

std::string gqa_small_attn_inputs_unsupported(std::int64_t D, std::int64_t BH, const void* Q, const void* K,
                                              const void* V) {
  if (D != kD) return "head_dim " + std::to_string(D) + " (the kernels take 128)";
  if (BH > 65535) return "more than 65535 (batch, head) pairs";
  if (!aligned16(Q) || !aligned16(K) || !aligned16(V)) return "a tensor not 16-byte aligned";
  return {};
}

std::string gqa_small_attn_unsupported(const GqaSmallAttn& a) {
  if (std::string why = gqa_small_attn_inputs_unsupported(a.D, a.BH, a.Q, a.K, a.V); !why.empty()) return why;
  if (a.ld % 8 != 0 || a.ld < a.S) return "dS row stride not a multiple of 8 at least S";
  if (a.do_ld % 8 != 0 || a.do_head % 8 != 0) return "dO strides not multiples of 8";
  if (a.split != 1 && a.split != 2) return "split " + std::to_string(a.split) + " (1 or 2)";
  if (!aligned16(a.dO) || !aligned16(a.dS) || !aligned16(a.dQ) || !aligned16(a.dK) || !aligned16(a.dV))
    return "a tensor not 16-byte aligned";
  if (a.O != nullptr && !aligned16(a.O)) return "O not 16-byte aligned";
  return {};
}

std::string gqa_small_attn_merge_unsupported(const GqaSmallAttn& a) {
  if (a.merged == nullptr || a.cos == nullptr || a.sin == nullptr) return "no merged output, cos or sin";
  if (a.Hq <= 0 || a.Hkv <= 0 || a.Hq % a.Hkv != 0) return "query heads not a multiple of the KV heads";
  const std::int64_t G = a.Hq / a.Hkv;
  if (G != 1 && G != 2 && G != 4 && G != 8) return "group size " + std::to_string(G) + " (clusters of 1, 2, 4 or 8)";
  if (a.BH % a.Hq != 0) return "(batch, head) pairs not a multiple of the query heads";
  if (a.ldm % 8 != 0 || a.ldm < (a.Hq + 2 * a.Hkv) * kD) return "merged row stride not a multiple of 8 holding every head";
  if (!aligned16(a.merged) || !aligned16(a.cos) || !aligned16(a.sin)) return "merged, cos or sin not 16-byte aligned";
  return {};
}

void gqa_small_attn_launch(const GqaSmallAttn& a, cudaStream_t stream) {
  if (const std::string why = gqa_small_attn_unsupported(a); !why.empty()) throw Error("gqa_small_attn", why);
  const bool merged = a.merged != nullptr;
  if (merged)
    if (const std::string why = gqa_small_attn_merge_unsupported(a); !why.empty()) throw Error("gqa_small_attn", why);
  const MergeOut mo{a.merged, a.ldm, a.cos, a.sin, static_cast<int>(a.Hq), static_cast<int>(a.Hkv)};
  const int G = merged ? static_cast<int>(a.Hq / a.Hkv) : 0;
  const dim3 grid(static_cast<unsigned>((a.S + kRows - 1) / kRows), static_cast<unsigned>(a.BH));
  const bool split = a.split == 2;
  const std::size_t smem = split ? dp_smem_bytes<true, 2>() : dp_smem_bytes<true, 1>();
  const bool ro = a.O != nullptr;
  const auto first = ro ? (merged ? (split ? dp_softmax_kernel<true, true, 2, true> : dp_softmax_kernel<true, true, 1, true>)
                                  : (split ? dp_softmax_kernel<true, false, 2, true> : dp_softmax_kernel<true, false, 1, true>))
                        : (merged ? (split ? dp_softmax_kernel<true, true, 2> : dp_softmax_kernel<true, true, 1>)
                                  : (split ? dp_softmax_kernel<true, false, 2> : dp_softmax_kernel<true, false, 1>));
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(first, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  first<<<grid, split ? 2 * kThreads : kThreads, smem, stream>>>(a.dO, a.do_ld, a.do_head, a.V, a.P, a.dS, a.S, a.ld,
                                                                   a.scaling, a.K, a.dQ, a.BH, mo, a.O, a.pdl == 2);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  const auto second = G == 0   ? small_dkdv_kernel<0>
                      : G == 1 ? small_dkdv_kernel<1>
                      : G == 2 ? small_dkdv_kernel<2>
                      : G == 4 ? small_dkdv_kernel<4>
                               : small_dkdv_kernel<8>;
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(second, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kKvSmem)));
  // A programmatic dependent (a.pdl != 0) only where the kernel's machine code waits for its primary (griddepcontrol:
  // sm_90 or later; a build for an older target runs it as a plain launch). Merged: in clusters of the G query heads of a
  // KV head (consecutive along y).
  cudaFuncAttributes fa{};
  ATTNBWD_CUDA_CHECK(cudaFuncGetAttributes(&fa, second));
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (a.pdl != 0 && fa.binaryVersion >= 90) attrs[n++] = programmatic_dependent_attribute();
  if (merged) {
    attrs[n].id = cudaLaunchAttributeClusterDimension;
    attrs[n].val.clusterDim.x = 1, attrs[n].val.clusterDim.y = static_cast<unsigned>(G), attrs[n].val.clusterDim.z = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((a.S + kKeys - 1) / kKeys), static_cast<unsigned>(a.BH));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kKvSmem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, second, a.P, static_cast<const bf*>(a.dS), a.ld, a.dO, a.do_ld, a.do_head,
                                        a.Q, a.dK, a.dV, a.S, a.BH, mo));
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
