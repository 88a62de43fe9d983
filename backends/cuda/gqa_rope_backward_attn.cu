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

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "gqa_rope_backward_attn.hpp"
#include "griddep.cuh"

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

// dO(bh, q, :) = dO + bh·do_head + q·do_ld. kDq: also K [BH, S, 128] and dQ [BH, S, 128] (dQ = dS·K).
template <bool kDq>
__global__ void __launch_bounds__(kThreads) dp_softmax_kernel(const bf* __restrict__ dO, int64_t do_ld, int64_t do_head,
                                                              const bf* __restrict__ V, const bf* __restrict__ P,
                                                              bf* __restrict__ dS, int64_t S, int64_t ld, float scaling,
                                                              const bf* __restrict__ K, bf* __restrict__ dQ) {
  __shared__ __align__(16) bf vs[kKeys * kStride];
  __shared__ __align__(16) bf kst[kDq ? kKeys * kStride : 8];
  if constexpr (kDq) griddep_launch_dependents();  // small_dkdv_kernel may queue
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

  // Sweep 2: dS (and with kDq dQ += dS·K_tile from the rounded dS values, keys past S and invalid rows zero).
  float dq[kDq ? 16 : 1][4];
  if constexpr (kDq) {
#pragma unroll
    for (int j = 0; j < 16; ++j) dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
  }
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
    if constexpr (kDq) load_v_tile(kst, K + bh * S * kD, S, k0);
    __syncthreads();
    dp_tile(acc, a, vs, g, t);
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
          sa[nt][half] = pack2(out[0], out[1]);
        } else if (key < S) {
          drow[key] = out[0];
          sa[nt][half] = pack2(out[0], __float2bfloat16_rn(0.0f));
        }
      }
    }
    if constexpr (kDq) {
      // dQ += dS (16 rows × 64 keys: A fragments from the C layout) · K_tile (64 keys × 128; B by ldmatrix.trans).
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
  }
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

// dV₃₂ = Pᵀ·dO and dK₃₂ = dSᵀ·Q for keys [64·blockIdx.x, +64) of head bh = blockIdx.y (one rounding each).
constexpr int kBq = 32;        // query rows per tile
constexpr int kPStride = 72;   // smem row stride of the P and dS tiles (elements; 144 B: conflict-free ldmatrix)

__global__ void __launch_bounds__(kThreads) small_dkdv_kernel(const bf* __restrict__ P, const bf* __restrict__ dS,
                                                              int64_t ld, const bf* __restrict__ dO, int64_t do_ld,
                                                              int64_t do_head, const bf* __restrict__ Q,
                                                              bf* __restrict__ dK, bf* __restrict__ dV, int64_t S) {
  __shared__ __align__(16) bf ps[kBq * kPStride];
  __shared__ __align__(16) bf dss[kBq * kPStride];
  __shared__ __align__(16) bf dos[kBq * kStride];
  __shared__ __align__(16) bf qs[kBq * kStride];
  griddep_wait();  // dS is the previous kernel's output
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4, m = lane / 8;
  const int64_t bh = blockIdx.y, k0 = static_cast<int64_t>(blockIdx.x) * kKeys;
  const bf* p = P + bh * S * S;
  const bf* ds = dS + bh * S * ld;
  const bf* o = dO + bh * do_head;
  const bool p_vec = S % 8 == 0 && reinterpret_cast<std::uintptr_t>(P) % 16 == 0;
  const bf* q = Q + bh * S * kD;
  float dv[16][4], dk[16][4];
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[j][e] = dk[j][e] = 0.0f;
  for (int64_t q0 = 0; q0 < S; q0 += kBq) {
    __syncthreads();
    for (int i = threadIdx.x; i < kBq * (kKeys / 8); i += kThreads) {  // P and dS tiles [query][key], zero past S
      const int r = i / (kKeys / 8), c = (i % (kKeys / 8)) * 8;
      const int64_t qr = q0 + r, kc = k0 + c;
      uint4 xp = make_uint4(0, 0, 0, 0), xs = xp;
      if (qr < S && kc + 8 <= S) {  // dS rows: ld % 8 == 0 and 16-byte aligned; P rows where S % 8 == 0 (p_vec)
        xs = *reinterpret_cast<const uint4*>(ds + qr * ld + kc);
        if (p_vec) xp = *reinterpret_cast<const uint4*>(p + qr * S + kc);
      }
      bf* ep = reinterpret_cast<bf*>(&xp);
      bf* es = reinterpret_cast<bf*>(&xs);
      if (qr < S && (kc + 8 > S || !p_vec)) {  // the row's last keys, or P rows not 16-byte aligned: one at a time
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const bool in = kc + e < S;
          ep[e] = in ? p[qr * S + kc + e] : __float2bfloat16_rn(0.0f);
          if (kc + 8 > S) es[e] = in ? ds[qr * ld + kc + e] : __float2bfloat16_rn(0.0f);
        }
      }
      *reinterpret_cast<uint4*>(ps + r * kPStride + c) = xp;
      *reinterpret_cast<uint4*>(dss + r * kPStride + c) = xs;
    }
    for (int i = threadIdx.x; i < kBq * (kD / 8); i += kThreads) {  // dO and Q tiles [query][dim], 16-byte moves
      const int r = i / (kD / 8), c = i % (kD / 8);
      uint4 xo = make_uint4(0, 0, 0, 0), xq = xo;
      if (q0 + r < S) {
        xo = *reinterpret_cast<const uint4*>(o + (q0 + r) * do_ld + c * 8);
        xq = *reinterpret_cast<const uint4*>(q + (q0 + r) * kD + c * 8);
      }
      *reinterpret_cast<uint4*>(dos + r * kStride + c * 8) = xo;
      *reinterpret_cast<uint4*>(qs + r * kStride + c * 8) = xq;
    }
    __syncthreads();
#pragma unroll
    for (int kq = 0; kq < kBq / 16; ++kq) {
      // A = Pᵀ and dSᵀ (rows: this warp's 16 keys; k: 16 queries): matrix m = (queries 8·(m / 2), keys 8·(m % 2)).
      std::uint32_t ap[4], as[4];
      const int arow = 16 * kq + (m / 2) * 8 + lane % 8, acol = 16 * warp + (m % 2) * 8;
      ldsm4_t(ap, ps + arow * kPStride + acol);
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
  }
  const int64_t ka = k0 + 16 * warp + g, kb = ka + 8;
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
  dp_softmax_kernel<false><<<grid, kThreads, 0, stream>>>(dO, kD, S * kD, V, P, dS, S, ld, scaling, nullptr, nullptr);
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
  dp_softmax_kernel<true><<<grid, kThreads, 0, stream>>>(a.dO, a.do_ld, a.do_head, a.V, a.P, a.dS, a.S, a.ld,
                                                         a.scaling, a.K, a.dQ);
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
  cfg.stream = stream;
  cfg.attrs = &pdl;
  cfg.numAttrs = fa.binaryVersion >= 90 ? 1 : 0;
  ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, small_dkdv_kernel, a.P, static_cast<const bf*>(a.dS), a.ld, a.dO,
                                        a.do_ld, a.do_head, a.Q, a.dK, a.dV, a.S));
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
