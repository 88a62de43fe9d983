// O = bf16(P·V) [BH, S, 128] for the softmax row term of gqa's small path and dP + softmax kernel
// (ATTNBWD_CUDA_GQA_PV=side; gqa_rope_backward_attn.hpp): an mma.sync kernel, valid on sm_90a and sm_100a.
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "gqa_rope_backward_attn.hpp"
#include "gqa_rope_small_tiles.cuh"
#include "mma_fp16.cuh"

namespace attnbwd::cuda {
namespace {

// O = bf16(P·V) per head for the softmax row term r = Σ_d dO·O of the small path's first kernel and the dP + softmax
// kernel (ATTNBWD_CUDA_GQA_PV=side; the op runs it on its side stream beside the dA GEMM). A persistent grid of at most
// `ctas` CTAs, one per SM (8 warps, four stages of 35 KB: more than half an SM's shared memory, so that the grid takes
// exactly as many SMs as it has CTAs and leaves the others to the dA GEMM, sized for them), walks the items (128 query
// rows, head) in order. Warp w owns rows 16w.. of the item and all 128 columns of O (fp32, 64 registers per thread);
// per 64-key tile: V's rows by cp.async (rows past S zero) and P's 128 rows at their phases (issue_p_row); A from P's
// pairs (two 4-byte shared loads and a byte_perm: a row's phase may be odd), keys past S masked to zero on the last
// tile; B by ldmatrix.trans of V. One rounding at the end, rows < S stored. Any S and alignment of P (cuBLASLt has only
// slow kernels for P's odd rows); V 16-byte and O 4-byte aligned.
constexpr int kPvRows = 128, kPvThreads = 256, kPvStages = 4;
constexpr int kPvKeyTile = kKeys * kStride;  // elements of a V tile
constexpr int kPvStage = kPvKeyTile + kPvRows * kPStride;  // elements: V, then P
constexpr std::size_t kPvSmem = static_cast<std::size_t>(kPvStages) * kPvStage * sizeof(bf);
static_assert(kPvSmem > 116 * 1024, "one CTA per SM");

__global__ void __launch_bounds__(kPvThreads, 1) pv_kernel(const bf* __restrict__ P, const bf* __restrict__ V,
                                                           bf* __restrict__ O, int64_t S, int64_t BH) {
  extern __shared__ __align__(16) unsigned char pv_smem[];
  bf* const sm = reinterpret_cast<bf*>(pv_smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t nb = (S + kPvRows - 1) / kPvRows, items = nb * BH, n = (S + kKeys - 1) / kKeys;
  const bf* pend = P + BH * S * S;
  const int p_row = static_cast<int>(threadIdx.x) / 2;  // this thread's row of the P tile (two threads per row)
  const int rl = warp * 16 + g;                         // this lane's rows rl, rl + 8 of the item
  // ldmatrix.trans of V: matrix m = (keys 8·(m % 2), dims 8·(j + m / 2)) of a 16-key chunk
  const int v_off = (((lane / 8) % 2) * 8 + lane % 8) * kStride + (lane / 16) * 8;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t bh = item / nb, qc = (item - bh * nb) * kPvRows;
    const bf* p = P + bh * S * S;
    const bf* v = V + bh * S * kD;
    const bool p_valid = qc + p_row < S;
    const bf* p_src = p_valid ? p + (qc + p_row) * S : p;
    p_src -= p_shift(p_src);
    const int64_t qa = qc + rl, qb = qa + 8;
    // this lane's first pair in rows rl, rl + 8 of a tile (element offsets), and the byte selectors of odd phases
    const int sa = p_shift(p + qa * S), sb = p_shift(p + qb * S);
    const int oa = kPvKeyTile + rl * kPStride + sa + 2 * t, ob = kPvKeyTile + (rl + 8) * kPStride + sb + 2 * t;
    const std::uint32_t sel_a = (oa & 1) ? 0x5432u : 0x3210u, sel_b = (ob & 1) ? 0x5432u : 0x3210u;
    const auto pair = [](const bf* st, int off, std::uint32_t sel) {
      const std::uint32_t* w = reinterpret_cast<const std::uint32_t*>(st + (off & ~1));
      return __byte_perm(w[0], w[1], sel);
    };
    const auto issue = [&](int64_t k0, int, int buf) {
      bf* st = sm + buf * kPvStage;
      issue_rows<kKeys, kPvThreads>(st, v, kD, S, k0);
      issue_p_row<2>(st + kPvKeyTile + p_row * kPStride, p_src + k0, p_valid, P, pend, static_cast<int>(threadIdx.x) % 2);
    };
    float acc[16][4];
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    int64_t k0 = 0;
    mma16::stream_blocks_deep<kKeys, kPvStages>(0, n * kKeys, issue, [&](int buf, int) {
      const bf* st = sm + buf * kPvStage;
      const bool partial = k0 + kKeys > S;
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        std::uint32_t a[4] = {pair(st, oa + 16 * kk, sel_a), pair(st, ob + 16 * kk, sel_b),
                              pair(st, oa + 16 * kk + 8, sel_a), pair(st, ob + 16 * kk + 8, sel_b)};
        if (partial) {  // keys past S hold the next row's values (or zeros past the tensor): masked
          const int lim = static_cast<int>(S - k0) - 16 * kk - 2 * t;  // this lane's first key is valid below lim
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int l = lim - (e >= 2 ? 8 : 0);
            a[e] = l >= 2 ? a[e] : l == 1 ? (a[e] & 0xFFFFu) : 0u;
          }
        }
        mma_b_tile(acc, a, st + v_off + 16 * kk * kStride);
      }
      k0 += kKeys;
    });
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if (qa < S)
        *reinterpret_cast<__nv_bfloat162*>(O + (bh * S + qa) * kD + 8 * j + 2 * t) =
            __floats2bfloat162_rn(acc[j][0], acc[j][1]);
      if (qb < S)
        *reinterpret_cast<__nv_bfloat162*>(O + (bh * S + qb) * kD + 8 * j + 2 * t) =
            __floats2bfloat162_rn(acc[j][2], acc[j][3]);
    }
  }
}

}  // namespace

std::string gqa_pv_unsupported(const bf* P, const bf* V, const bf* O, std::int64_t S, std::int64_t BH, std::int64_t D) {
  if (D != kD) return "head_dim " + std::to_string(D) + " (the kernel takes 128)";
  if (S < 1 || BH < 1) return "no rows";
  if (!aligned16(V) || reinterpret_cast<std::uintptr_t>(O) % 4 != 0 || reinterpret_cast<std::uintptr_t>(P) % 2 != 0)
    return "V not 16-byte aligned, O not 4-byte aligned or P not 2-byte aligned";
  return {};
}

void gqa_pv_launch(const bf* P, const bf* V, bf* O, std::int64_t S, std::int64_t BH, std::int64_t D, int ctas,
                   cudaStream_t stream) {
  if (const std::string why = gqa_pv_unsupported(P, V, O, S, BH, D); !why.empty()) throw Error("gqa_pv", why);
  if (ctas < 1) throw Error("gqa_pv", "no CTAs");
  const std::int64_t items = (S + kPvRows - 1) / kPvRows * BH;
  const unsigned grid = static_cast<unsigned>(items < ctas ? items : ctas);
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(pv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kPvSmem)));
  pv_kernel<<<grid, kPvThreads, kPvSmem, stream>>>(P, V, O, S, BH);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
