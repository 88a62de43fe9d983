// gqa_rope_backward, steps 3-4 fused (spec §3): dS = bf16(bf16(P⊙(dP − r))·scaling) with
// dP = bf16(dO·Vᵀ) and r = Σ_keys P·dP, for head_dim 128, without materialising dP.
//
// One CTA of 4 warps per (b·Hq + h, 64 query rows); each warp owns 16 rows, their dO as mma.sync A
// fragments in registers. Two sweeps over 64-key tiles of V (staged in shared memory): the first
// sums r (fp32, a fixed order: deterministic), the second recomputes the dP tile and writes dS.
// Tensor cores through mma.sync.m16n8k16 (bf16 in, fp32 accumulate): valid on sm_90a and sm_100a.
// Tails: rows and keys past S read as zero and are never written.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "check.hpp"

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

__device__ __forceinline__ void mma16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Stages keys [k0, k0 + 64) of V (one head, [S, 128]) into vs; keys past S are zero.
__device__ __forceinline__ void load_v_tile(bf* vs, const bf* __restrict__ v, int64_t S, int64_t k0) {
  for (int i = threadIdx.x; i < kKeys * (kD / 8); i += kThreads) {
    const int key = i / (kD / 8), chunk = i % (kD / 8);
    uint4 x = make_uint4(0, 0, 0, 0);
    if (k0 + key < S) x = *reinterpret_cast<const uint4*>(v + (k0 + key) * kD + chunk * 8);
    *reinterpret_cast<uint4*>(vs + key * kStride + chunk * 8) = x;
  }
}

// acc[nt] = dO(16 rows of this warp)·V_tileᵀ for the 8 key groups nt of the tile.
__device__ __forceinline__ void dp_tile(float (&acc)[8][4], const std::uint32_t (&a)[8][4], const bf* vs, int g,
                                        int t) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const bf* row = vs + (nt * 8 + g) * kStride + ks * 16 + 2 * t;
      const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(row);
      const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(row + 8);
      mma16816(acc[nt], a[ks], b0, b1);
    }
  }
}

// P[row][key], P[row][key + 1] (zero past S or for an invalid row); one 4-byte load when S is even.
__device__ __forceinline__ __nv_bfloat162 load_p_pair(const bf* __restrict__ prow, int64_t key, int64_t S, bool valid,
                                                      bool even) {
  __nv_bfloat162 x;
  x.x = x.y = __float2bfloat16_rn(0.0f);
  if (!valid) return x;
  if (even && key + 1 < S) return *reinterpret_cast<const __nv_bfloat162*>(prow + key);
  if (key < S) x.x = prow[key];
  if (key + 1 < S) x.y = prow[key + 1];
  return x;
}

__global__ void __launch_bounds__(kThreads) dp_softmax_kernel(const bf* __restrict__ dO, const bf* __restrict__ V,
                                                              const bf* __restrict__ P, bf* __restrict__ dS,
                                                              int64_t S, int64_t ld, float scaling) {
  __shared__ __align__(16) bf vs[kKeys * kStride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y;
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * kRows + warp * 16;
  const bf* v = V + bh * S * kD;
  const bf* p = P + bh * S * S;
  bf* ds = dS + bh * S * ld;

  // A fragments: rows q0+g (regs 0, 2) and q0+g+8 (regs 1, 3); columns 16ks+2t (+8 for regs 2, 3).
  const int64_t qa = q0 + g, qb = q0 + g + 8;
  const bool va = qa < S, vb = qb < S;
  std::uint32_t a[8][4];
  {
    const bf* oa = dO + (bh * S + qa) * kD;
    const bf* ob = dO + (bh * S + qb) * kD;
#pragma unroll
    for (int ks = 0; ks < 8; ++ks) {
      const int col = ks * 16 + 2 * t;
      a[ks][0] = va ? *reinterpret_cast<const std::uint32_t*>(oa + col) : 0u;
      a[ks][1] = vb ? *reinterpret_cast<const std::uint32_t*>(ob + col) : 0u;
      a[ks][2] = va ? *reinterpret_cast<const std::uint32_t*>(oa + col + 8) : 0u;
      a[ks][3] = vb ? *reinterpret_cast<const std::uint32_t*>(ob + col + 8) : 0u;
    }
  }
  const bf* pa = p + qa * S;
  const bf* pb = p + qb * S;
  const bool even = S % 2 == 0 && reinterpret_cast<std::uintptr_t>(P) % 4 == 0;

  // Sweep 1: r for rows qa, qb (this lane's share, then the quad's).
  float ra = 0.0f, rb = 0.0f;
  float acc[8][4];
  for (int64_t k0 = 0; k0 < S; k0 += kKeys) {
    __nv_bfloat162 pv[8][2];  // this tile's P, loaded ahead of the MMAs
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int64_t key = k0 + nt * 8 + 2 * t;
      pv[nt][0] = load_p_pair(pa, key, S, va, even);
      pv[nt][1] = load_p_pair(pb, key, S, vb, even);
    }
    __syncthreads();
    load_v_tile(vs, v, S, k0);
    __syncthreads();
    dp_tile(acc, a, vs, g, t);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      // Zero P past S or off the rows: those terms add exactly 0 (dP there is 0 too).
      ra += __low2float(pv[nt][0]) * r16(acc[nt][0]) + __high2float(pv[nt][0]) * r16(acc[nt][1]);
      rb += __low2float(pv[nt][1]) * r16(acc[nt][2]) + __high2float(pv[nt][1]) * r16(acc[nt][3]);
    }
  }
  ra += __shfl_xor_sync(0xffffffffu, ra, 1);
  ra += __shfl_xor_sync(0xffffffffu, ra, 2);
  rb += __shfl_xor_sync(0xffffffffu, rb, 1);
  rb += __shfl_xor_sync(0xffffffffu, rb, 2);

  // Sweep 2: dS.
  for (int64_t k0 = 0; k0 < S; k0 += kKeys) {
    __nv_bfloat162 pv[8][2];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int64_t key = k0 + nt * 8 + 2 * t;
      pv[nt][0] = load_p_pair(pa, key, S, va, even);
      pv[nt][1] = load_p_pair(pb, key, S, vb, even);
    }
    __syncthreads();
    load_v_tile(vs, v, S, k0);
    __syncthreads();
    dp_tile(acc, a, vs, g, t);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int64_t key = k0 + nt * 8 + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const bool valid = half == 0 ? va : vb;
        if (!valid) continue;
        const float r = half == 0 ? ra : rb;
        bf* drow = ds + (half == 0 ? qa : qb) * ld;
        const float p2[2] = {__low2float(pv[nt][half]), __high2float(pv[nt][half])};
        bf out[2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
          out[e] = __float2bfloat16_rn(r16(p2[e] * (r16(acc[nt][2 * half + e]) - r)) * scaling);
        if (key + 1 < S) {
          __nv_bfloat162 pair;
          pair.x = out[0];
          pair.y = out[1];
          *reinterpret_cast<__nv_bfloat162*>(drow + key) = pair;  // ld and key even: 4-byte aligned
        } else if (key < S) {
          drow[key] = out[0];
        }
      }
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
  dp_softmax_kernel<<<grid, kThreads, 0, stream>>>(dO, V, P, dS, S, ld, scaling);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace attnbwd::cuda
