// gqa_rope_backward, steps 3-4 fused (spec §3): dS = bf16(bf16(P⊙(dP − r))·scaling) with
// dP = bf16(dO·Vᵀ) and r = Σ_keys P·dP, for head_dim 128, without materialising dP.
//
// One CTA of 4 warps per (b·Hq + h, 64 query rows); each warp owns 16 rows, their dO as mma.sync A
// fragments in registers. Two sweeps over 64-key tiles of V (staged in shared memory): the first
// sums r (fp32, a fixed order: deterministic), the second recomputes the dP tile and writes dS.
// Tensor cores through mma.sync.m16n8k16 (bf16 in, fp32 accumulate): valid on sm_90a and sm_100a.
// Tails: rows and keys past S read as zero and are never written.
//
// The small-S attention path (ATTNBWD_CUDA_GQA_ATTN=small, gqa_small_attn) is two launches of this file's kernels
// instead of padding copies, five GEMMs and the row kernel: the same kernel with kDq (the second sweep also stages
// the K tile and accumulates dQ = dS·K from dS's registers, one rounding at the end), then small_dkdv_kernel,
// key-major: CTA = (b·Hq + h, 64 keys), each warp 16 keys, dV₃₂ = Pᵀ·dO and dK₃₂ = dSᵀ·Q over 32-query tiles of P,
// dS, dO and Q in shared memory (the transposed operands by ldmatrix.trans), fp32 accumulators, one rounding each.
// It is a programmatic dependent of the first (it waits for it before reading anything).
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "gqa_rope_backward_attn.hpp"
#include "griddep.cuh"
#include "mma_fp16.cuh"

namespace attnbwd::cuda {
namespace {

using std::int64_t;
using bf = __nv_bfloat16;

constexpr int kD = 128;        // head_dim
constexpr int kRows = 64;      // query rows per CTA (16 per warp)
constexpr int kKeys = 64;      // keys per tile
constexpr int kStride = 136;   // smem row stride of the V tile (elements): conflict-free fragment loads
constexpr int kThreads = 128;

__device__ __forceinline__ float r16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Four 8 × 8 b16 matrices from shared memory, transposed: lane l gives the row address of matrix l / 8, row l % 8;
// register m holds, for lane 4·g + t, elements (2t, g) and (2t + 1, g) of matrix m.
__device__ __forceinline__ void ldsm4_t(std::uint32_t (&r)[4], const bf* p) {
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ std::uint32_t pack2(bf lo, bf hi) {
  return static_cast<std::uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<std::uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Issues the cp.async copies of keys [k0, k0 + 64) of one head's [S, 128] V or K into a tile of row stride kStride
// (keys past S zero-filled, nothing read for them). The caller commits and waits.
__device__ __forceinline__ void issue_key_tile(bf* s, const bf* __restrict__ x, int64_t S, int64_t k0) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
#pragma unroll
  for (int u = 0; u < kKeys * kChunks / kThreads; ++u) {
    const int i = static_cast<int>(threadIdx.x) + u * kThreads, r = i / kChunks, c = (i % kChunks) * 8;
    const bool valid = k0 + r < S;
    mma16::cp_async16(s + r * kStride + c, x + (valid ? (k0 + r) * kD + c : 0), valid);
  }
}

// Four 8 × 8 b16 matrices from shared memory: lane l gives the row address of matrix l / 8, row l % 8; register m
// holds, for lane 4·g + t, elements (g, 2t) and (g, 2t + 1) of matrix m.
__device__ __forceinline__ void ldsm4(std::uint32_t (&r)[4], const bf* p) {
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// acc[nt] = dO(16 rows of this warp)·V_tileᵀ for the 8 key groups nt of the tile; the B fragments of key groups nt,
// nt + 1 by one ldmatrix.x4: matrix m = (keys 8·(nt + m / 2), dims 16·ks + 8·(m % 2)).
__device__ __forceinline__ void dp_tile(float (&acc)[8][4], const std::uint32_t (&a)[8][4], const bf* vs, int lane) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  const bf* base = vs + ((lane / 16) * 8 + lane % 8) * kStride + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
#pragma unroll
    for (int nt = 0; nt < 8; nt += 2) {
      std::uint32_t b[4];
      ldsm4(b, base + nt * 8 * kStride + ks * 16);
      mma16816(acc[nt], a[ks], b[0], b[1]);
      mma16816(acc[nt + 1], a[ks], b[2], b[3]);
    }
  }
}

// P tiles keep each row's 16-byte phase (P's rows start at any element): element (r, c) of a tile is at
// r·kPStride + sh(r) + c, sh(r) = the row start's element offset within its 16-byte chunk, and a row is 9 aligned
// chunks (64 keys and up to 7 before them). A chunk not wholly inside the tensor [pbeg, pend) is copied an element
// at a time (zero outside); rows past `rows` are zero. Keys past S hold the next row's values: every reader masks
// them or multiplies them by zero.
constexpr int kPStride = 72;  // elements; 144 B: conflict-free ldmatrix on the aligned tiles of the same stride
__device__ __forceinline__ int p_shift(const bf* p) {
  return static_cast<int>((reinterpret_cast<std::uintptr_t>(p) >> 1) & 7);
}
template <int kTileRows>
__device__ __forceinline__ void issue_p_tile(bf* s, const bf* pbeg, const bf* pend, const bf* __restrict__ p, int64_t S,
                                             int64_t q0, int rows, int64_t k0) {
  constexpr int kChunks = kPStride / 8;  // 9
  for (int i = threadIdx.x; i < kTileRows * kChunks; i += kThreads) {
    const int r = i / kChunks, ch = i % kChunks;
    bf* dst = s + r * kPStride + 8 * ch;
    if (r >= rows) {
      mma16::cp_async16(dst, pbeg, false);
      continue;
    }
    const bf* row = p + (q0 + r) * S + k0;
    const bf* src = row - p_shift(row) + 8 * ch;
    if (src >= pbeg && src + 8 <= pend) {
      mma16::cp_async16(dst, src, true);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) dst[e] = src + e >= pbeg && src + e < pend ? src[e] : __float2bfloat16_rn(0.0f);
    }
  }
}

// Shared memory of dp_softmax_kernel: kDpStages stages of the V tile (64 keys × kStride), the CTA's P tile (64 rows
// × kPStride) and with kDq the K tile: 44 KB per stage with kDq, two stages, two CTAs per SM.
constexpr int kDpStages = 2;
constexpr int kKeyTile = kKeys * kStride;  // elements
constexpr int kPTile = kRows * kPStride;   // elements
template <bool kDq>
constexpr int kDpStage = (kDq ? 2 * kKeyTile : kKeyTile) + kPTile;  // elements per stage: V, [K,] P
template <bool kDq>
constexpr std::size_t dp_smem_bytes() {
  return static_cast<std::size_t>(kDpStages) * kDpStage<kDq> * sizeof(bf);
}

// dO(bh, q, :) = dO + bh·do_head + q·do_ld. kDq: also K [BH, S, 128] and dQ [BH, S, 128] (dQ = dS·K). P: [BH, S, S].
// The two sweeps are one stream of 2n key tiles (n = ⌈S / 64⌉; tile i < n: sweep 1, V and P; i ≥ n: sweep 2, V, P
// and with kDq K) through kDpStages cp.async stages.
template <bool kDq>
__global__ void __launch_bounds__(kThreads) dp_softmax_kernel(const bf* __restrict__ dO, int64_t do_ld, int64_t do_head,
                                                              const bf* __restrict__ V, const bf* __restrict__ P,
                                                              bf* __restrict__ dS, int64_t S, int64_t ld, float scaling,
                                                              const bf* __restrict__ K, bf* __restrict__ dQ,
                                                              int64_t BH) {
  extern __shared__ __align__(16) unsigned char dp_smem[];
  bf* const sm = reinterpret_cast<bf*>(dp_smem);
  if constexpr (kDq) griddep_launch_dependents();  // small_dkdv_kernel may queue
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y;
  const int64_t qc = static_cast<int64_t>(blockIdx.x) * kRows;  // the CTA's first row
  const int rows = static_cast<int>(S - qc < kRows ? S - qc : kRows);
  const bf* v = V + bh * S * kD;
  const bf* kh = kDq ? K + bh * S * kD : nullptr;
  const bf* p = P + bh * S * S;
  const bf* pend = P + BH * S * S;
  bf* ds = dS + bh * S * ld;
  const int64_t n = (S + kKeys - 1) / kKeys;  // key tiles per sweep

  // The first stage's tiles go out before the dO fragments are read.
  const auto issue = [&](int64_t r0, int, int buf) {
    const int64_t tile = r0 / kKeys, k0 = (tile < n ? tile : tile - n) * kKeys;
    bf* st = sm + buf * kDpStage<kDq>;
    issue_key_tile(st, v, S, k0);
    issue_p_tile<kRows>(st + kKeyTile, P, pend, p, S, qc, rows, k0);
    if constexpr (kDq)
      if (tile >= n) issue_key_tile(st + kKeyTile + kPTile, kh, S, k0);
  };

  // A fragments: rows q0+g (regs 0, 2) and q0+g+8 (regs 1, 3); columns 16ks+2t (+8 for regs 2, 3).
  const int rl = warp * 16 + g;  // this lane's first row in the CTA's tile (the second: rl + 8)
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
  // This lane's P elements in a tile: rows rl, rl + 8 at their phases (64-key tiles keep a row's phase), keys
  // 8·nt + 2t and + 1.
  const int pa_off = rl * kPStride + p_shift(p + qa * S) + 2 * t;
  const int pb_off = (rl + 8) * kPStride + p_shift(p + qb * S) + 2 * t;
  const auto p_at = [](const bf* ps, int off) { return __bfloat162float(ps[off]); };

  float ra = 0.0f, rb = 0.0f;  // r for rows qa, qb (this lane's share until sweep 2, then the quad's)
  float acc[8][4];
  float dq[kDq ? 16 : 1][4];
  if constexpr (kDq) {
#pragma unroll
    for (int j = 0; j < 16; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
  }
  int64_t tile = 0;
  mma16::stream_blocks_deep<kKeys, kDpStages>(0, 2 * n * kKeys, issue, [&](int buf, int) {
    const bf* st = sm + buf * kDpStage<kDq>;
    const bf* ps = st + kKeyTile;
    dp_tile(acc, a, st, lane);
    if (tile < n) {
      // Sweep 1. Keys past S: dP is exactly 0 there (V's rows zero), so their P values (the next row's) add 0;
      // rows past S: P and dO zero.
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        ra += p_at(ps, pa_off + 8 * nt) * r16(acc[nt][0]) + p_at(ps, pa_off + 8 * nt + 1) * r16(acc[nt][1]);
        rb += p_at(ps, pb_off + 8 * nt) * r16(acc[nt][2]) + p_at(ps, pb_off + 8 * nt + 1) * r16(acc[nt][3]);
      }
      ++tile;
      return;
    }
    if (tile == n) {  // the quad's sums
      ra += __shfl_xor_sync(0xffffffffu, ra, 1);
      ra += __shfl_xor_sync(0xffffffffu, ra, 2);
      rb += __shfl_xor_sync(0xffffffffu, rb, 1);
      rb += __shfl_xor_sync(0xffffffffu, rb, 2);
    }
    // Sweep 2: dS (and with kDq dQ += dS·K_tile from the rounded dS values; keys past S and rows past S zero).
    const int64_t k0 = (tile - n) * kKeys;
    std::uint32_t sa[8][2];  // the dS values of this lane's pairs (zero where not written)
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int64_t key = k0 + nt * 8 + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        sa[nt][half] = 0u;
        const bool valid = half == 0 ? va : vb;
        if (!valid) continue;
        const float r = half == 0 ? ra : rb;
        const int off = (half == 0 ? pa_off : pb_off) + 8 * nt;
        bf* drow = ds + (half == 0 ? qa : qb) * ld;
        const float p2[2] = {p_at(ps, off), p_at(ps, off + 1)};
        bf out[2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
          out[e] = __float2bfloat16_rn(r16(p2[e] * (r16(acc[nt][2 * half + e]) - r)) * scaling);
        if (key + 1 < S) {
          __nv_bfloat162 pair;
          pair.x = out[0];
          pair.y = out[1];
          *reinterpret_cast<__nv_bfloat162*>(drow + key) = pair;  // ld and key even: 4-byte aligned
          sa[nt][half] = pack2(out[0], out[1]);
        } else if (key < S) {
          drow[key] = out[0];
          sa[nt][half] = pack2(out[0], __float2bfloat16_rn(0.0f));
        }
      }
    }
    if constexpr (kDq) {
      // dQ += dS (16 rows × 64 keys: A fragments from the C layout) · K_tile (64 keys × 128; B by ldmatrix.trans).
      const bf* kst = ps + kPTile;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const std::uint32_t af[4] = {sa[2 * kk][0], sa[2 * kk][1], sa[2 * kk + 1][0], sa[2 * kk + 1][1]};
#pragma unroll
        for (int j = 0; j < 16; j += 2) {
          const int m = lane / 8;
          std::uint32_t b[4];
          ldsm4_t(b, kst + (16 * kk + (m % 2) * 8 + lane % 8) * kStride + 8 * (j + m / 2));
          mma16816(dq[j], af, b[0], b[1]);
          mma16816(dq[j + 1], af, b[2], b[3]);
        }
      }
    }
    ++tile;
  });
  if constexpr (kDq) {
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

// dV₃₂ = Pᵀ·dO and dK₃₂ = dSᵀ·Q for keys [64·blockIdx.x, +64) of head bh = blockIdx.y (one rounding each), over
// 32-query tiles of P, dS, dO and Q streamed through kKvStages cp.async stages.
constexpr int kBq = 32;        // query rows per tile
constexpr int kKvStages = 3;
constexpr int kKvStage = 2 * kBq * kPStride + 2 * kBq * kStride;  // elements: P, dS, dO, Q tiles
constexpr std::size_t kKvSmem = static_cast<std::size_t>(kKvStages) * kKvStage * sizeof(bf);

__global__ void __launch_bounds__(kThreads) small_dkdv_kernel(const bf* __restrict__ P, const bf* __restrict__ dS,
                                                              int64_t ld, const bf* __restrict__ dO, int64_t do_ld,
                                                              int64_t do_head, const bf* __restrict__ Q,
                                                              bf* __restrict__ dK, bf* __restrict__ dV, int64_t S,
                                                              int64_t BH) {
  extern __shared__ __align__(16) unsigned char kv_smem[];
  bf* const sm = reinterpret_cast<bf*>(kv_smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, m = lane / 8;
  const int64_t bh = blockIdx.y, k0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const bf* p = P + bh * S * S;
  const bf* pend = P + BH * S * S;
  const bf* ds = dS + bh * S * ld;
  const bf* o = dO + bh * do_head;
  const bf* q = Q + bh * S * kD;
  griddep_wait();  // dS is the previous kernel's output
  const auto issue = [&](int64_t q0, int rows, int buf) {
    bf* st = sm + buf * kKvStage;
    issue_p_tile<kBq>(st, P, pend, p, S, q0, rows, k0);
    bf* dss = st + kBq * kPStride;
#pragma unroll
    for (int u = 0; u < kBq * (kKeys / 8) / kThreads; ++u) {  // dS: ld % 8 == 0, so a chunk starting before S
      const int i = static_cast<int>(threadIdx.x) + u * kThreads;  // ends inside the row
      const int r = i / (kKeys / 8), c = (i % (kKeys / 8)) * 8;
      const bool valid = r < rows && k0 + c < S;
      mma16::cp_async16(dss + r * kPStride + c, valid ? ds + (q0 + r) * ld + k0 + c : ds, valid);
    }
    bf* dos = dss + kBq * kPStride;
    bf* qs = dos + kBq * kStride;
#pragma unroll
    for (int u = 0; u < kBq * (kD / 8) / kThreads; ++u) {
      const int i = static_cast<int>(threadIdx.x) + u * kThreads;
      const int r = i / (kD / 8), c = (i % (kD / 8)) * 8;
      const bool valid = r < rows;
      mma16::cp_async16(dos + r * kStride + c, valid ? o + (q0 + r) * do_ld + c : o, valid);
      mma16::cp_async16(qs + r * kStride + c, valid ? q + (q0 + r) * kD + c : q, valid);
    }
  };
  float dv[16][4], dk[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[j][e] = dk[j][e] = 0.0f;
  const int key_a = 16 * warp + g;  // this lane's keys in the tile: key_a, key_a + 8
  int64_t q0 = 0;
  mma16::stream_blocks_deep<kBq, kKvStages>(0, S, issue, [&](int buf, int) {
    const bf* ps = sm + buf * kKvStage;
    const bf* dss = ps + kBq * kPStride;
    const bf* dos = dss + kBq * kPStride;
    const bf* qs = dos + kBq * kStride;
#pragma unroll
    for (int kq = 0; kq < kBq / 16; ++kq) {
      // A = Pᵀ (rows: this warp's 16 keys; k: 16 queries) element by element from the phase-kept P tile;
      // A = dSᵀ by ldmatrix.trans: matrix m = (queries 8·(m / 2), keys 8·(m % 2)).
      std::uint32_t ap[4], as[4];
      {
        const auto pt = [&](int r, int key) {  // tile element (r, key), as 16 bits
          const bf* row = p + (q0 + r) * S + k0;
          return static_cast<std::uint32_t>(__bfloat16_as_ushort(ps[r * kPStride + p_shift(row) + key]));
        };
        const int r0 = 16 * kq + 2 * t;
        ap[0] = pt(r0, key_a) | pt(r0 + 1, key_a) << 16;
        ap[1] = pt(r0, key_a + 8) | pt(r0 + 1, key_a + 8) << 16;
        ap[2] = pt(r0 + 8, key_a) | pt(r0 + 9, key_a) << 16;
        ap[3] = pt(r0 + 8, key_a + 8) | pt(r0 + 9, key_a + 8) << 16;
      }
      const int arow = 16 * kq + (m / 2) * 8 + lane % 8, acol = 16 * warp + (m % 2) * 8;
      ldsm4_t(as, dss + arow * kPStride + acol);
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        // B = dO and Q (k: 16 queries, n: dims 8j..): matrix m = (queries 8·(m % 2), dims 8·(j + m / 2)).
        const int brow = 16 * kq + (m % 2) * 8 + lane % 8, bcol = 8 * (j + m / 2);
        std::uint32_t bo[4], bq[4];
        ldsm4_t(bo, dos + brow * kStride + bcol);
        ldsm4_t(bq, qs + brow * kStride + bcol);
        mma16816(dv[j], ap, bo[0], bo[1]);
        mma16816(dv[j + 1], ap, bo[2], bo[3]);
        mma16816(dk[j], as, bq[0], bq[1]);
        mma16816(dk[j + 1], as, bq[2], bq[3]);
      }
    }
    q0 += kBq;
  });
  const int64_t ka = k0 + key_a, kb = ka + 8;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int64_t col = 8 * j + 2 * t;
    if (ka < S) {
      *reinterpret_cast<__nv_bfloat162*>(dV + (bh * S + ka) * kD + col) = __floats2bfloat162_rn(dv[j][0], dv[j][1]);
      *reinterpret_cast<__nv_bfloat162*>(dK + (bh * S + ka) * kD + col) = __floats2bfloat162_rn(dk[j][0], dk[j][1]);
    }
    if (kb < S) {
      *reinterpret_cast<__nv_bfloat162*>(dV + (bh * S + kb) * kD + col) = __floats2bfloat162_rn(dv[j][2], dv[j][3]);
      *reinterpret_cast<__nv_bfloat162*>(dK + (bh * S + kb) * kD + col) = __floats2bfloat162_rn(dk[j][2], dk[j][3]);
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
                                                             BH);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  return true;
}

std::string gqa_small_attn_unsupported(const GqaSmallAttn& a) {
  const auto a16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if (a.D != kD) return "head_dim " + std::to_string(a.D) + " (the kernels take 128)";
  if (a.BH > 65535) return "more than 65535 (batch, head) pairs";
  if (a.ld % 8 != 0 || a.ld < a.S) return "dS row stride not a multiple of 8 at least S";
  if (a.do_ld % 8 != 0 || a.do_head % 8 != 0) return "dO strides not multiples of 8";
  if (!a16(a.dO) || !a16(a.Q) || !a16(a.K) || !a16(a.V) || !a16(a.dS) || !a16(a.dQ) || !a16(a.dK) || !a16(a.dV))
    return "a tensor not 16-byte aligned";
  return {};
}

void gqa_small_attn_launch(const GqaSmallAttn& a, cudaStream_t stream) {
  if (const std::string why = gqa_small_attn_unsupported(a); !why.empty()) throw Error("gqa_small_attn", why);
  const dim3 grid(static_cast<unsigned>((a.S + kRows - 1) / kRows), static_cast<unsigned>(a.BH));
  constexpr std::size_t smem = dp_smem_bytes<true>();
  ATTNBWD_CUDA_CHECK(
      cudaFuncSetAttribute(dp_softmax_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  ATTNBWD_CUDA_CHECK(
      cudaFuncSetAttribute(small_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kKvSmem)));
  dp_softmax_kernel<true><<<grid, kThreads, smem, stream>>>(a.dO, a.do_ld, a.do_head, a.V, a.P, a.dS, a.S, a.ld,
                                                            a.scaling, a.K, a.dQ, a.BH);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  // A programmatic dependent only where the kernel's machine code waits for its primary (griddepcontrol: sm_90 or
  // later; a build for an older target runs it as a plain launch).
  cudaFuncAttributes fa{};
  ATTNBWD_CUDA_CHECK(cudaFuncGetAttributes(&fa, small_dkdv_kernel));
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>((a.S + kKeys - 1) / kKeys), static_cast<unsigned>(a.BH));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kKvSmem;
  cfg.stream = stream;
  cfg.attrs = &pdl;
  cfg.numAttrs = fa.binaryVersion >= 90 ? 1 : 0;
  ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, small_dkdv_kernel, a.P, static_cast<const bf*>(a.dS), a.ld, a.dO,
                                        a.do_ld, a.do_head, a.Q, a.dK, a.dV, a.S, a.BH));
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
