// Y = A·Wᵀ with the fp32 weight W converted to fp16 in the kernel (mixed_gemm.hpp), for M ≤ 224 rows.
//
// Work split: the N/8 column tiles (8 weight rows each) are dealt out in contiguous runs of at most 12 to
// one CTA per SM (at N = 10752 on 132 SMs: 10 or 11 tiles, 80-88 weight rows), so the weight streams from
// DRAM once, spread evenly, and every CTA holds all M rows of the result for its columns.
// Pipeline, per k-step of 64: cp.async brings the CTA's fp32 weight rows (≤ 96 × 256 bytes, a ring of 4) and
// the M × 64 fp16 rows of A (from L2: every CTA reads all of A; a ring of 3) into shared memory, one commit
// group per step with the weight one step ahead of A. In step ks the 256 threads convert the weight block of
// step ks + 1 to fp16 (into one of two fp16 tiles, and to Wh) while the same warps run the mma.sync products of
// step ks on the other tile: the conversion's loads and stores interleave with the tensor-core work, and one
// barrier per step orders it all (the first version converted and multiplied between two barriers per step and
// ran ~2.5x slower than its DRAM traffic: 153 us at S = 131 under ncu, 1.4 TB/s).
// Products: warp w takes the column half w / 4 (6 tiles) and the 16-row blocks w % 4, w % 4 + 4, ... (at most 4:
// 96 fp32 accumulators per thread). Warps w and w + 4 share a scheduler, so each scheduler gets the same rows.
#include "mixed_gemm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "check.hpp"
#include "mma_fp16.cuh"

namespace attnbwd::cuda {
namespace {

using namespace mma16;

constexpr int kThreads = 256;
constexpr int kBK = 64;                    // k per step
constexpr int kMaxTiles = 12;              // 8-column tiles per CTA
constexpr int kRows = 8 * kMaxTiles;       // weight rows per CTA, at most
constexpr int kLdH = kBK + 8;              // fp16 tile rows (halves): 144 bytes, conflict-free ldmatrix
constexpr int kWStages = 4, kAStages = 3;  // ring depths (weight one step ahead of A)
constexpr int kWStage = kRows * kBK * 4;   // bytes of one fp32 weight block (rows of 256 bytes)
constexpr int kWhTile = kRows * kLdH * 2;  // bytes of one fp16 weight tile
constexpr int kMaxBlocks = 4;              // 16-row blocks per warp (M ≤ 4 · 4 · 16 = 256; kMixedGemmMaxM)

__host__ __device__ constexpr int a_stage_bytes(int mp) { return mp * kLdH * 2; }
__host__ __device__ constexpr int smem_bytes(int mp) { return kWStages * kWStage + 2 * kWhTile + kAStages * a_stage_bytes(mp); }
static_assert(smem_bytes(224) <= 227 * 1024, "shared memory of one sm_90 / sm_100 CTA at M = kMixedGemmMaxM");

__global__ void __launch_bounds__(kThreads, 1) mixed_gemm_kernel(const MixedGemm g, int tiles_total, int ctas, int diag) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int mp = static_cast<int>((g.M + 15) / 16) * 16, mblocks = mp / 16;
  const int t0 = static_cast<int>(static_cast<std::int64_t>(blockIdx.x) * tiles_total / ctas);
  const int t1 = static_cast<int>(static_cast<std::int64_t>(blockIdx.x + 1) * tiles_total / ctas);
  const int tiles = t1 - t0, rows = 8 * tiles;
  const std::int64_t n0 = 8 * static_cast<std::int64_t>(t0);
  const int ksteps = static_cast<int>(g.K / kBK);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  float* const w_ring = reinterpret_cast<float*>(smem);
  __half* const wh_tiles = reinterpret_cast<__half*>(smem + kWStages * kWStage);
  __half* const a_ring = reinterpret_cast<__half*>(smem + kWStages * kWStage + 2 * kWhTile);
  const auto w_stage = [&](int step) { return w_ring + (step % kWStages) * (kWStage / 4); };
  const auto wh_tile = [&](int step) { return wh_tiles + (step % 2) * (kWhTile / 2); };
  const auto a_stage = [&](int step) { return a_ring + (step % kAStages) * (a_stage_bytes(mp) / 2); };

  // Rows of the fp16 weight tiles past this CTA's rows are read by the last ldmatrix pair: zeros, never stored.
  for (int i = tid; i < 2 * kWhTile / 16; i += kThreads) reinterpret_cast<uint4*>(wh_tiles)[i] = make_uint4(0, 0, 0, 0);

  const auto issue_w = [&](int step) {
    if (step >= ksteps) return;
    float* ws = w_stage(step);
    const std::int64_t k0 = static_cast<std::int64_t>(step) * kBK;
    for (int i = tid; i < rows * (kBK / 4); i += kThreads) {  // 16 chunks of 4 floats per row
      const int r = i / (kBK / 4), c = i % (kBK / 4);
      cp_async16(ws + r * kBK + 4 * c, g.W + (n0 + r) * g.K + k0 + 4 * c, true);
    }
  };
  const auto issue_a = [&](int step) {
    if (step < 0 || step >= ksteps) return;
    __half* as = a_stage(step);
    const std::int64_t k0 = static_cast<std::int64_t>(step) * kBK;
    for (int i = tid; i < mp * (kBK / 8); i += kThreads) {  // 8 chunks of 8 halves per row; rows ≥ M zero
      const int r = i / (kBK / 8), c = i % (kBK / 8);
      const bool valid = r < g.M;
      cp_async16(as + r * kLdH + 8 * c, g.A + (valid ? r : 0) * g.lda + k0 + 8 * c, valid);
    }
  };
  // fp32 → fp16 of step `step`'s weight block: one 4-float chunk per thread and pass, to the tile and to Wh.
  const auto convert = [&](int step) {
    if (step >= ksteps || (diag & 4)) return;
    const float* ws = w_stage(step);
    __half* wt = wh_tile(step);
    for (int i = tid; i < rows * (kBK / 4); i += kThreads) {
      const int r = i / (kBK / 4), c = i % (kBK / 4);
      const float4 v = *reinterpret_cast<const float4*>(ws + r * kBK + 4 * c);
      uint2 h;
      h.x = half2_bits(v.x, v.y);
      h.y = half2_bits(v.z, v.w);
      *reinterpret_cast<uint2*>(wt + r * kLdH + 4 * c) = h;
      if (g.Wh && !(diag & 2))
        *reinterpret_cast<uint2*>(g.Wh + (n0 + r) * g.K + static_cast<std::int64_t>(step) * kBK + 4 * c) = h;
    }
  };

  float acc[kMaxBlocks][6][4];
#pragma unroll
  for (int b = 0; b < kMaxBlocks; ++b)
#pragma unroll
    for (int j = 0; j < 6; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[b][j][e] = 0.0f;

  const int half = warp / 4, mrow = warp % 4;
  const int tile0 = 6 * half;  // this warp's first column tile within the CTA's
  // ldmatrix lane addresses (mma_abt's): A rows (lane & 15), k half (lane >> 4); B rows of the tile pair.
  const int a_off = (lane & 15) * kLdH + (lane >> 4) * 8;
  const int b_off = ((lane & 7) + ((lane >> 4) << 3)) * kLdH + ((lane >> 3) & 1) * 8;

  // Commit group j holds the weight block of step j and the A rows of step j - 1.
  issue_w(0);
  cp_async_commit();
  issue_w(1), issue_a(0);
  cp_async_commit();
  issue_w(2), issue_a(1);
  cp_async_commit();
  cp_async_wait<2>();  // group 0: the weight block of step 0
  __syncthreads();
  convert(0);
  for (int ks = 0; ks < ksteps; ++ks) {
    cp_async_wait<1>();  // groups ≤ ks + 1: the weight block of step ks + 1, the A rows of step ks
    // Every thread's copies landed and its fp16 tile of step ks written; every warp is done with step ks - 1's
    // products (its A slot and fp16 tile are free) and with converting step ks (its weight slot is free).
    __syncthreads();
    issue_w(ks + 3), issue_a(ks + 2);
    cp_async_commit();
    convert(ks + 1);
    if (tile0 < tiles && !(diag & 1)) {
      const std::uint32_t a_base = smem_u32(a_stage(ks)) + 2 * a_off;
      const std::uint32_t b_base = smem_u32(wh_tile(ks) + tile0 * 8 * kLdH) + 2 * b_off;
#pragma unroll
      for (int k16 = 0; k16 < kBK; k16 += 16) {
        std::uint32_t b[3][4];
#pragma unroll
        for (int p = 0; p < 3; ++p) ldsm4(b[p], b_base + 2 * (p * 16 * kLdH + k16));
#pragma unroll
        for (int bi = 0; bi < kMaxBlocks; ++bi) {
          const int mb = mrow + 4 * bi;
          if (mb < mblocks) {
            std::uint32_t a[4];
            ldsm4(a, a_base + 2 * (mb * 16 * kLdH + k16));
#pragma unroll
            for (int p = 0; p < 3; ++p) {
              mma16816(acc[bi][2 * p], a[0], a[1], a[2], a[3], b[p][0], b[p][1]);
              mma16816(acc[bi][2 * p + 1], a[0], a[1], a[2], a[3], b[p][2], b[p][3]);
            }
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // Y: lane = 4·gr + tc holds rows gr and gr + 8, columns 2·tc and 2·tc + 1 of each tile.
  const int gr = lane / 4, tc = lane % 4;
#pragma unroll
  for (int bi = 0; bi < kMaxBlocks; ++bi) {
    const int mb = mrow + 4 * bi;
    if (mb >= mblocks) continue;
#pragma unroll
    for (int j = 0; j < 6; ++j) {
      if (tile0 + j >= tiles) continue;
      const std::int64_t col = n0 + 8 * (tile0 + j) + 2 * tc;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::int64_t row = 16 * mb + gr + 8 * h;
        if (row < g.M) *reinterpret_cast<float2*>(g.Y + row * g.ldy + col) = make_float2(acc[bi][j][2 * h], acc[bi][j][2 * h + 1]);
      }
    }
  }
}

bool aligned(const void* p, std::uintptr_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

bool disjoint(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x + an <= y || y + bn <= x;
}

}  // namespace

bool mixed_gemm_ok(const MixedGemm& g) {
  if (g.M < 1 || g.M > kMixedGemmMaxM || g.N < 8 || g.N % 8 != 0 || g.K < kBK || g.K % kBK != 0) return false;
  if (!g.A || !g.W || !g.Y || g.lda < g.K || g.lda % 8 != 0 || g.ldy < g.N || g.ldy % 2 != 0) return false;
  if (!aligned(g.A, 16) || !aligned(g.W, 16) || !aligned(g.Y, 8) || (g.Wh && !aligned(g.Wh, 16))) return false;
  const std::size_t a_bytes = static_cast<std::size_t>((g.M - 1) * g.lda + g.K) * 2,
                    w_bytes = static_cast<std::size_t>(g.N * g.K) * 4,
                    y_bytes = static_cast<std::size_t>((g.M - 1) * g.ldy + g.N) * 4;
  if (!disjoint(g.Y, y_bytes, g.A, a_bytes) || !disjoint(g.Y, y_bytes, g.W, w_bytes)) return false;
  if (g.Wh && (!disjoint(g.Wh, w_bytes / 2, g.A, a_bytes) || !disjoint(g.Wh, w_bytes / 2, g.W, w_bytes) ||
               !disjoint(g.Wh, w_bytes / 2, g.Y, y_bytes)))
    return false;
  return true;
}

void mixed_gemm(const MixedGemm& g, int sms, cudaStream_t stream) {
  const int tiles = static_cast<int>(g.N / 8);
  const int ctas = std::max(std::min(sms, tiles), (tiles + kMaxTiles - 1) / kMaxTiles);
  const int bytes = smem_bytes(static_cast<int>((g.M + 15) / 16) * 16);
  const int diag = std::getenv("ATTNBWD_MIXED_DIAG") ? std::atoi(std::getenv("ATTNBWD_MIXED_DIAG")) : 0;
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(mixed_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  mixed_gemm_kernel<<<ctas, kThreads, bytes, stream>>>(g, tiles, ctas, diag);
  ATTNBWD_CUDA_CHECK_LAUNCH();
}

}  // namespace attnbwd::cuda
