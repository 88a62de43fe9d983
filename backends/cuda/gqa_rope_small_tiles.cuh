// Tiles and fragments shared by the mma.sync kernels of gqa_rope_backward_attn.cu (the small path, the fused dP)
// and gqa_rope_backward_pv.cu (O = P·V): head_dim 128, 64-key tiles of V/K/Q/dO rows (kStride) and of P rows at
// their 16-byte phase (kPStride), cp.async issue helpers and the m16n8k16 bf16 product. Internal to those files.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

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

__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Issues the cp.async copies of rows [k0, k0 + kTileRows) of a [S, 128] matrix x (V, K, Q or dO: row stride ldx)
// into a tile of row stride kStride; rows past S are zero-filled (nothing read). Thread i copies chunk i % 16 of rows
// i / 16 + (kNThreads / 16)·u: one 64-bit address per call, the rest immediate offsets (kNThreads: the CTA's threads).
// The caller commits and waits.
template <int kTileRows, int kNThreads = kThreads>
__device__ __forceinline__ void issue_rows(bf* s, const bf* __restrict__ x, int64_t ldx, int64_t S, int64_t k0) {
  constexpr int kChunks = kD / 8, kStep = kNThreads / kChunks;  // 16 chunks per row, 8 or 16 rows per pass
  static_assert(kTileRows % kStep == 0, "whole passes");
  const int r = static_cast<int>(threadIdx.x) / kChunks, c = (static_cast<int>(threadIdx.x) % kChunks) * 8;
  const bf* src = x + (k0 + r) * ldx + c;
  bf* dst = s + r * kStride + c;
#pragma unroll
  for (int u = 0; u < kTileRows / kStep; ++u) {
    const bool valid = k0 + r + u * kStep < S;
    mma16::cp_async16(dst + u * kStep * kStride, valid ? src + u * kStep * ldx : x, valid);
  }
}

// acc[nt] = dO(16 rows of this warp)·V_tileᵀ for the NT key groups nt of 8 keys from vs (the tile, or its second
// half); the B fragments of key groups nt, nt + 1 by one ldmatrix.x4: matrix m = (keys 8·(nt + m / 2), dims 16·ks +
// 8·(m % 2)).
template <int NT>
__device__ __forceinline__ void dp_tile(float (&acc)[NT][4], const std::uint32_t (&a)[8][4], const bf* vs, int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  const bf* base = vs + ((lane / 16) * 8 + lane % 8) * kStride + ((lane / 8) % 2) * 8;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      std::uint32_t b[4];
      mma16::ldsm4(b, mma16::smem_u32(base + nt * 8 * kStride + ks * 16));
      mma16816(acc[nt], a[ks], b[0], b[1]);
      mma16816(acc[nt + 1], a[ks], b[2], b[3]);
    }
  }
}

// P tiles keep each row's 16-byte phase (P's rows start at any element): element (r, c) of a tile is at
// r·kPStride + sh(r) + c, sh(r) = the row start's element offset within its 16-byte chunk, and a row is 9 aligned
// chunks (64 keys and up to 7 before them). A chunk not wholly inside the tensor [pbeg, pend) is copied an element
// at a time (zero outside); invalid rows are zero. Keys past S hold the next row's values: every reader masks them
// or multiplies them by zero. Tiles start at keys k0 ≡ 0 (mod 64) and rows q0 ≡ 0 (mod 32), so a row's phase
// depends only on its head and its index mod 8: fixed per thread for a whole kernel.
constexpr int kPStride = 72;  // elements; 144 B: conflict-free ldmatrix on the aligned tiles of the same stride
constexpr int kPChunks = kPStride / 8;
__device__ __forceinline__ int p_shift(const bf* p) {
  return static_cast<int>((reinterpret_cast<std::uintptr_t>(p) >> 1) & 7);
}
// One row of a P tile by kTpr threads (this one: chunks c0, c0 + kTpr, ...); src: the row's first key less its shift.
template <int kTpr>
__device__ __forceinline__ void issue_p_row(bf* dst, const bf* src, bool valid, const bf* pbeg, const bf* pend,
                                            int c0) {
#pragma unroll
  for (int j = 0; j < (kPChunks + kTpr - 1) / kTpr; ++j) {
    const int ch = c0 + kTpr * j;
    if (ch >= kPChunks) break;
    bf* d = dst + 8 * ch;
    const bf* s = src + 8 * ch;
    if (!valid) {
      mma16::cp_async16(d, pbeg, false);
    } else if (s >= pbeg && s + 8 <= pend) {
      mma16::cp_async16(d, s, true);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) d[e] = s + e >= pbeg && s + e < pend ? s[e] : __float2bfloat16_rn(0.0f);
    }
  }
}

// acc += A (16 rows × 16 k of this warp's m16n8k16 A fragments) · B (16 k × 128 columns of a [k][kStride] tile at b,
// its fragments by ldmatrix.trans: the caller's b points at this lane's ldmatrix row, k 8·(m % 2) + lane % 8 and
// columns 8·(m / 2) for matrix m = lane / 8). dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q and O += P·V of the small kernels.
__device__ __forceinline__ void mma_b_tile(float (&acc)[16][4], const std::uint32_t (&a)[4], const bf* b) {
#pragma unroll
  for (int j = 0; j < 16; j += 2) {
    std::uint32_t f[4];
    mma16::ldsm4_trans(f, mma16::smem_u32(b + 8 * j));
    mma16816(acc[j], a, f[0], f[1]);
    mma16816(acc[j + 1], a, f[2], f[3]);
  }
}

}  // namespace
}  // namespace attnbwd::cuda
