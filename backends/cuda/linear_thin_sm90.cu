// The thin-T linear backward of linear_thin_sm90.hpp on sm_90a.
//
// CTA (slice s, range r): columns n0 = 128·s .. n0 + 127 of `in`, k-blocks [r·kbr, (r + 1)·kbr) of `out` (64 rows
// each). Warpgroup 0 loads X's slice [64·MB][128] once and streams, per k-block, dY's tile
// A = dY[0, 64·MB)[kb·64, +64) and W's tile [64 k][128 n] (two 64 × 64 boxes) through two rings (one producer
// thread each: W, from DRAM, runs ahead of A, from L2, whose slots warpgroup 0 holds longer); all boxes 128-byte
// swizzled, rows ≥ T and columns past the tensors read as zeros. Two consumer warpgroups, all products m64n128k16
// (a 64 × 16 A and a 16 × 128 B from shared memory):
//   warpgroup 0: the dW block D[64 out][128 n] = Aᵀ·X (A read M-major: the same swizzled rows [t][64 out] that dX
//                reads K-major; K = 64·MB in steps of 16) into one of two register sets in turn; while k-block i's
//                products run, k-block i − 1's block is rounded to bf16 into a staging buffer and stored by two TMA
//                boxes (at MB = 4 it also holds dX's row block 3);
//   warpgroup 1: dX's row blocks 0 .. min(MB, 3) − 1 (A K-major, W N-major).
// (The second version, dW and dX's block 0 on warpgroup 0 with the epilogue after its own products, left the tensor
// pipe idle during every epilogue: 65 µs at gqa #5 against a 36 µs TMA-copy ceiling for the same traffic;
// perf/NOTES.md, nineteenth session.)
// A slot is released by each warpgroup once the next k-block's wait shows its products of it done.
// dX: with one range, rounded and stored from the registers; else every CTA publishes its fp32 partial (fragment
// order, to L2) and the partials are summed in range order (deterministic): where every slice's cluster of ranges
// (at most 8) can be resident at once, the CTAs of the cluster meet at a cluster barrier and each sums a share;
// else a second launch (linear_thin_reduce_kernel: one float4 of one unit per thread, every load of the sum in flight
// at once) sums them; the first version's sum by the slice's last CTA to arrive, latency-bound in one CTA per slice,
// cost ~20 µs at gqa #5 (perf/NOTES.md, nineteenth session).
// dX only (template DW = false, ThinPlan::dx_only): no X slice, no dW products or stores; warpgroup 1 holds dX's row
// blocks 0-2 and warpgroup 0 block 3 at MB = 4 (else it only takes part in the partials' sum), W's ring deeper.
// Rounding: one fp32 sum per output, one rounding to bf16 (the products of bf16 values are exact in fp32).
#include "linear_thin_sm90.hpp"

#include <cuda.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "cluster.cuh"
#include "sm90/ptx.cuh"

namespace attnbwd::cuda::sm90 {
namespace {

constexpr int kBN = 128, kBK = 64, kThreads = 384, kTileBytes = 64 * 128;  // one 64 × 64 bf16 box: 8 KB
constexpr int kMaxSegments = LinearBackward::kMaxSegments;
constexpr int kMaxRanges = 8;  // the CTAs of a slice are one cluster: at most 8 (the portable cluster size)

// DW: the launch computes dW as well (else dX alone: no X slice, no staging, a deeper W ring).
template <int MB, bool DW>
struct Cfg {
  static_assert(MB >= 1 && MB <= 4, "T <= 256");
  static constexpr int kABytes = MB * kTileBytes;             // dY tile [64·MB][64]
  static constexpr int kWBytes = 2 * kTileBytes;              // W tile [64][128] as two boxes
  static constexpr int kXBytes = DW ? 2 * MB * kTileBytes : 0;  // X slice: two [64·MB][64] chunks
  // Two rings: A (dY tiles, from L2; read by both consumer warpgroups, warpgroup 0 holds two slots while its
  // products of k-block i + 1 run) and W (from DRAM; read by warpgroup 1 only, so it runs further ahead). dX alone
  // gives the X slice's and the staging's shared memory to W's ring.
  static constexpr int kAStages = MB == 1 ? 4 : MB == 2 ? 4 : MB == 3 ? 4 : 3;
  static constexpr int kWStages = DW ? (MB == 1 ? 8 : MB == 2 ? 7 : MB == 3 ? 4 : 3)
                                     : (MB == 1 ? 12 : MB == 2 ? 10 : MB == 3 ? 8 : 8);
  static constexpr int kBufs = DW ? 1 : 0;                    // staging buffers of the dW block (2 boxes each)
  static constexpr int kBars = 1 + 2 * (kAStages + kWStages);
  static constexpr int kBarBytes = kBars * 8 <= 256 ? 256 : 512;
  static constexpr int kSmem = kXBytes + kAStages * kABytes + kWStages * kWBytes + 2 * kBufs * kTileBytes +
                               1024 /*align*/ + kBarBytes;
  static_assert(kSmem <= 227 * 1024, "shared memory of one H100/H200 CTA");
  static_assert(kBars * 8 <= kBarBytes, "barriers");
};

struct Params {
  int T, in, kb_total, kb_per_range, ranges;
  int seg[kMaxSegments];                               // first out row of each segment (INT_MAX: none)
  __nv_bfloat16* dx;
  long long stride_b, stride_h;  // dX [B][H][S][D]: element (t, n) at (t / S)·stride_b + (n / D)·stride_h +
  int rows_per_b, cols_per_h;    //   (t % S)·D + n % D, with S = rows_per_b, D = cols_per_h
  float* partial;                // [slices][ranges][MB · 16 · 128] float4
  int cluster;                   // the ranges of a slice are one cluster
};

struct Maps {
  CUtensorMap a, x, w[kMaxSegments], dw[kMaxSegments];
};

// The CTA's shared-memory rings: slot s of A at a + s·kABytes, of W at w + s·kWBytes; full barriers complete on the
// slot's bytes, empty ones on the consumers' arrivals (A: both consumer warpgroups; W: warpgroup 1).
struct Rings {
  std::uint8_t *a, *w;
  std::uint64_t *full_a, *empty_a, *full_w, *empty_w;
};

#if defined(ATTNBWD_SM90_DEVICE)

// The segment of out row `row` (segments start at multiples of 64: a k-block lies in one).
__device__ __forceinline__ int segment_of(const Params& p, int row) {
  return row >= p.seg[2] ? 2 : row >= p.seg[1] ? 1 : 0;
}
// Map s of the three (a select, not an index into the parameter space).
__device__ __forceinline__ const CUtensorMap* map_of(const CUtensorMap (&m)[kMaxSegments], int s) {
  return s == 2 ? &m[2] : s == 1 ? &m[1] : &m[0];
}
// Row `row` of out counted from the first row of its segment s.
__device__ __forceinline__ int segment_row(const Params& p, int s, int row) {
  return row - (s == 2 ? p.seg[2] : s == 1 ? p.seg[1] : 0);
}

// dX[m][n], dX[m][n + 1] = bf16(x), bf16(y) in the head-split layout, where m < T and n < in (n is even and so is
// D: a pair stays in one head).
__device__ __forceinline__ void store_dx_pair(const Params& p, int m, int n, float x, float y) {
  if (m >= p.T || n >= p.in) return;
  const int b = m / p.rows_per_b, h = n / p.cols_per_h;
  const long long off = b * p.stride_b + static_cast<long long>(m - b * p.rows_per_b) * p.cols_per_h +
                        h * p.stride_h + (n - h * p.cols_per_h);
  *reinterpret_cast<__nv_bfloat162*>(p.dx + off) = __floats2bfloat162_rn(x, y);
}

// dX rows of block j (64·j + fr, + 8) and columns n0 + 8·jb + 2·fq (+ 1) from m64n128 accumulators: stored from the
// registers with one range, else published as this CTA's fp32 partial (float4 (j, jb) of thread t at
// (16·j + jb)·128 + t).
template <int MB>
__device__ __forceinline__ void finish_dx_block(const Params& p, const float (&d)[64], int j, int slice, int range,
                                                int n0, int t) {
  const int fr = t / 32 * 16 + t % 32 / 4, fq = t % 4;
  if (p.ranges > 1) {
    float4* mine = reinterpret_cast<float4*>(p.partial) + (static_cast<std::size_t>(slice) * p.ranges + range) * MB * 2048;
#pragma unroll
    for (int jb = 0; jb < 16; ++jb)
      __stcg(mine + (16 * j + jb) * 128 + t, make_float4(d[4 * jb], d[4 * jb + 1], d[4 * jb + 2], d[4 * jb + 3]));
    return;
  }
#pragma unroll
  for (int jb = 0; jb < 16; ++jb)
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_dx_pair(p, 64 * j + fr + 8 * half, n0 + 8 * jb + 2 * fq, d[4 * jb + 2 * half], d[4 * jb + 2 * half + 1]);
}

// dX's row blocks of each consumer warpgroup: warpgroup 1 holds blocks 0 .. kDxBlocks1 − 1 (at most 3: 192
// accumulators), warpgroup 0 the rest (block 3 at MB = 4) beside its two dW accumulators.
template <int MB>
constexpr int kDxBlocks1 = MB < 3 ? MB : 3;

// The finished dW block d of k-block i (fp32, m64n128 fragments) rounded to bf16 into staging buffer i % kBufs (its
// two 64-column boxes, 128-byte swizzle: 16-byte chunk c of row r at c ^ (r % 8)), then stored by two TMA boxes at
// rows kb·64 of its segment. Warpgroup 0 only (named barrier 2).
template <int MB>
__device__ __forceinline__ void store_dw_block(const Maps& maps, const Params& p, const float (&d)[64],
                                               std::uint8_t* sStg, int i, int kb, int n0, int t) {
  using C = Cfg<MB, true>;
  const int fr = t / 32 * 16 + t % 32 / 4, fq = t % 4;
  std::uint8_t* b = sStg + (i % C::kBufs) * 2 * kTileBytes;
  if (t == 0) bulk_wait_read<C::kBufs - 1>();  // the stores that last read `b` are done with it
  named_barrier(2, 128);
#pragma unroll
  for (int jb = 0; jb < 16; ++jb)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = fr + 8 * half, c = jb % 8;
      *reinterpret_cast<__nv_bfloat162*>(b + (jb / 8) * kTileBytes + r * 128 + ((c ^ (r % 8)) * 16) + fq * 4) =
          __floats2bfloat162_rn(d[4 * jb + 2 * half], d[4 * jb + 2 * half + 1]);
    }
  fence_proxy_async_smem();
  named_barrier(2, 128);
  if (t == 0) {
    const int seg = segment_of(p, kb * kBK), row = segment_row(p, seg, kb * kBK);
#pragma unroll
    for (int c = 0; c < 2; ++c) tma_store_2d(map_of(maps.dw, seg), b + c * kTileBytes, n0 + 64 * c, row);
    bulk_commit();
  }
}

// Consumer warpgroup 0 (threads 128..255): per k-block the dW block [64 out][128 n] (K = 64·MB: the rows past T are
// zeros in both operands; a step count of ⌈T / 16⌉ would need a data-dependent branch between the products, which
// makes ptxas fence every one of them, C7519), and at MB = 4 dX's row block 3. The dW accumulators alternate between
// two register sets: k-block i's products are issued, then k-block i − 1's block (done: wait_group 1) is released,
// rounded and stored while they run, so the epilogue overlaps the tensor work instead of following it.
template <int MB>
__device__ __forceinline__ void consume_dw(const Maps& maps, const Params& p, std::uint8_t* sX, const Rings& rg,
                                           std::uint8_t* sStg, std::uint64_t* x_full, int slice, int range, int n0,
                                           int kb0, int nkb) {
  using C = Cfg<MB, true>;
  constexpr bool kDx = MB > kDxBlocks1<MB>;  // this warpgroup holds dX's row block 3
  const int t = static_cast<int>(threadIdx.x) - 128;
  float aw0[64], aw1[64], ax[kDx ? 64 : 1];
  const std::uint32_t x_base = smem_addr(sX);
  mbar_wait(x_full, 0);
  auto products = [&](float(&aw)[64], int i) {
    const int s = i % C::kAStages;
    mbar_wait(&rg.full_a[s], (i / C::kAStages) & 1);
    const std::uint32_t sa = smem_addr(rg.a + s * C::kABytes);
    std::uint32_t sw = 0;
    if constexpr (kDx) {
      const int sv = i % C::kWStages;
      mbar_wait(&rg.full_w[sv], (i / C::kWStages) & 1);
      sw = smem_addr(rg.w + sv * C::kWBytes);
    }
    wgmma_fence();
#pragma unroll
    for (int kt = 0; kt < 4 * MB; ++kt)
      wgmma_m64n128k16_bf16<1>(aw, smem_desc(sa + 2048 * kt, kTileBytes, 1024),
                  smem_desc(x_base + 2048 * kt, MB * kTileBytes, 1024), kt > 0);
    if constexpr (kDx) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        wgmma_m64n128k16_bf16<0>(ax, smem_desc(sa + 3 * kTileBytes + 32 * kk, 16, 1024),
                    smem_desc(sw + 2048 * kk, kTileBytes, 1024), i > 0 || kk > 0);
    }
    wgmma_commit();
  };
  auto finish = [&](float(&aw)[64], int i) {  // k-block i's products are done
    if (t == 0) {
      mbar_arrive(&rg.empty_a[i % C::kAStages]);
      if constexpr (kDx) mbar_arrive(&rg.empty_w[i % C::kWStages]);
    }
    fence_regs(aw);
    store_dw_block<MB>(maps, p, aw, sStg, i, kb0 + i, n0, t);
  };
  if (nkb > 0) {
    // Every wait below finds one known group (the other set's) in flight: no wait is conditional.
    products(aw0, 0);
    int i = 1;
    for (; i + 1 < nkb; i += 2) {
      products(aw1, i);
      wgmma_wait<1>();
      finish(aw0, i - 1);
      products(aw0, i + 1);
      wgmma_wait<1>();
      finish(aw1, i);
    }
    if (i < nkb) {
      products(aw1, i);
      wgmma_wait<1>();
      finish(aw0, i - 1);
      wgmma_wait<0>();
      finish(aw1, i);
    } else {
      wgmma_wait<0>();
      finish(aw0, i - 1);
    }
  }
  if (t == 0) bulk_wait_read<0>();  // the staging buffers stay valid until the stores have read them
  if constexpr (kDx) {
    fence_regs(ax);
    finish_dx_block<MB>(p, ax, 3, slice, range, n0, t);
  }
}

// A consumer warpgroup's dX row blocks J0 .. J0 + kBlocks − 1 (threads TBase .. TBase + 127): warpgroup 1 holds blocks
// 0 .. kDxBlocks1 − 1; without dW, warpgroup 0 holds block 3 at MB = 4 (with dW, consume_dw does).
template <int MB, bool DW, int J0, int kBlocks, int TBase>
__device__ __forceinline__ void consume_dx(const Params& p, const Rings& rg, int slice, int range, int n0, int nkb) {
  using C = Cfg<MB, DW>;
  const int t = static_cast<int>(threadIdx.x) - TBase;
  float ax[kBlocks][64];
  for (int i = 0; i < nkb; ++i) {
    const int s = i % C::kAStages, sv = i % C::kWStages;
    mbar_wait(&rg.full_a[s], (i / C::kAStages) & 1);
    mbar_wait(&rg.full_w[sv], (i / C::kWStages) & 1);
    const std::uint32_t sa = smem_addr(rg.a + s * C::kABytes), sw = smem_addr(rg.w + sv * C::kWBytes);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const std::uint64_t db = smem_desc(sw + 2048 * kk, kTileBytes, 1024);
#pragma unroll
      for (int j = 0; j < kBlocks; ++j)
        wgmma_m64n128k16_bf16<0>(ax[j], smem_desc(sa + (J0 + j) * kTileBytes + 32 * kk, 16, 1024), db, i > 0 || kk > 0);
    }
    wgmma_commit();
    wgmma_wait<1>();  // every product of k-block i − 1 is done: release its slot
    if (i > 0 && t == 0) {
      mbar_arrive(&rg.empty_a[(i - 1) % C::kAStages]);
      mbar_arrive(&rg.empty_w[(i - 1) % C::kWStages]);
    }
  }
  wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < kBlocks; ++j) {
    fence_regs(ax[j]);
    finish_dx_block<MB>(p, ax[j], J0 + j, slice, range, n0, t);
  }
}

// dX units v = first + step·m < 16·MB (v = 16·j + jb: row block j, n8 block jb), each the sum of the slice's partials
// in range order (the same order for every unit and call: deterministic); warpgroup w takes the units with m % 2 == w,
// two at a time with all their loads in flight. A cluster's CTA `range` takes (range, ranges).
template <int MB>
__device__ __forceinline__ void reduce_units(const Params& p, int slice, int first, int step, int n0) {
  const int ct = static_cast<int>(threadIdx.x) - 128;
  const int wg = ct / 128, t = ct % 128, warp = t / 32, lane = t % 32;
  const int fr = warp * 16 + lane / 4, fq = lane % 4;
  const float4* part = reinterpret_cast<const float4*>(p.partial) + static_cast<std::size_t>(slice) * p.ranges * MB * 2048;
  const std::size_t stride = static_cast<std::size_t>(MB) * 2048;  // between ranges
#pragma unroll 1
  for (int v0 = first + step * wg; v0 < 16 * MB; v0 += 4 * step) {
    float4 x[2][kMaxRanges];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int v = v0 + 2 * q * step;
      const float4* pu = part + v * 128 + t;
#pragma unroll
      for (int r = 0; r < kMaxRanges; ++r)
        if (v < 16 * MB && r < p.ranges) x[q][r] = __ldcg(pu + r * stride);
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int v = v0 + 2 * q * step;
      if (v >= 16 * MB) continue;
      float4 a = x[q][0];
#pragma unroll
      for (int r = 1; r < kMaxRanges; ++r)
        if (r < p.ranges) a.x += x[q][r].x, a.y += x[q][r].y, a.z += x[q][r].z, a.w += x[q][r].w;
      const int j = v / 16, n = n0 + 8 * (v % 16) + 2 * fq;
      store_dx_pair(p, 64 * j + fr, n, a.x, a.y);
      store_dx_pair(p, 64 * j + fr + 8, n, a.z, a.w);
    }
  }
}

template <int MB, bool DW>
__global__ void __launch_bounds__(kThreads, 1)
    linear_thin_kernel(const __grid_constant__ Maps maps, const __grid_constant__ Params p) {
  using C = Cfg<MB, DW>;
  constexpr bool kWg0 = DW || MB > kDxBlocks1<MB>;  // warpgroup 0 consumes the rings
  extern __shared__ std::uint8_t smem_raw[];
  std::uint8_t* sX = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  Rings rg;
  rg.a = sX + C::kXBytes;                                        // A ring
  rg.w = rg.a + C::kAStages * C::kABytes;                        // W ring
  std::uint8_t* sStg = rg.w + C::kWStages * C::kWBytes;          // staging: kBufs dW blocks of 2 boxes
  std::uint64_t* x_full = reinterpret_cast<std::uint64_t*>(sStg + 2 * C::kBufs * kTileBytes);
  rg.full_a = x_full + 1;
  rg.empty_a = rg.full_a + C::kAStages;
  rg.full_w = rg.empty_a + C::kAStages;
  rg.empty_w = rg.full_w + C::kWStages;

  const int slice = static_cast<int>(blockIdx.x) / p.ranges, range = static_cast<int>(blockIdx.x) % p.ranges;
  const int n0 = slice * kBN;
  const int kb0 = range * p.kb_per_range, kb1 = min(kb0 + p.kb_per_range, p.kb_total);
  const int nkb = kb1 - kb0;

  if (threadIdx.x == 0) {
    mbar_init(x_full, 1);
    for (int s = 0; s < C::kAStages; ++s) {
      mbar_init(&rg.full_a[s], 1);
      mbar_init(&rg.empty_a[s], kWg0 ? 2 : 1);  // one arrival per consumer warpgroup
    }
    for (int s = 0; s < C::kWStages; ++s) {
      mbar_init(&rg.full_w[s], 1);
      mbar_init(&rg.empty_w[s], MB > kDxBlocks1<MB> ? 2 : 1);  // warpgroup 1 (and 0 where it holds dX block 3)
    }
    mbar_init_fence();
  }
  __syncthreads();
  // The partials' sum (a programmatic dependent launch, where there is one) may be scheduled once every CTA of this
  // grid is resident: it waits for this grid's end before reading anything.
  griddep_launch_dependents();

  if (threadIdx.x < 128) {  // producer warpgroup
    setmaxnreg_dec<40>();
    // Two producer threads, one per ring, so that W's loads run ahead of A's slots.
    if (threadIdx.x == 0) {
      if constexpr (DW) {
        mbar_arrive_expect_tx(x_full, C::kXBytes);
#pragma unroll
        for (int c = 0; c < 2; ++c) tma_load_2d(sX + c * MB * kTileBytes, &maps.x, x_full, n0 + 64 * c, 0);
      }
      // dY may be the previous kernel's output (a programmatic dependent launch: linear_thin_launch's
      // after_own_kernel); X and W are not. Without the launch attribute this returns at once.
      griddep_wait();
      for (int i = 0; i < nkb; ++i) {
        const int s = i % C::kAStages, kb = kb0 + i;
        mbar_wait(&rg.empty_a[s], ((i / C::kAStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&rg.full_a[s], C::kABytes);
        tma_load_2d(rg.a + s * C::kABytes, &maps.a, &rg.full_a[s], kb * kBK, 0);  // box {64 out, 64·MB t}
      }
    } else if (threadIdx.x == 32) {
      for (int i = 0; i < nkb; ++i) {
        const int s = i % C::kWStages, kb = kb0 + i;
        mbar_wait(&rg.empty_w[s], ((i / C::kWStages) & 1) ^ 1);
        mbar_arrive_expect_tx(&rg.full_w[s], C::kWBytes);
        const int seg = segment_of(p, kb * kBK), kr = segment_row(p, seg, kb * kBK);
#pragma unroll
        for (int c = 0; c < 2; ++c)  // boxes {64 n, 64 k}
          tma_load_2d(rg.w + s * C::kWBytes + c * kTileBytes, map_of(maps.w, seg), &rg.full_w[s], n0 + 64 * c, kr);
      }
    }
    if (p.ranges > 1 && p.cluster) cluster_sync();  // every thread of the cluster takes part
  } else {
    setmaxnreg_inc<232>();
    if (threadIdx.x < 256) {
      if constexpr (DW)
        consume_dw<MB>(maps, p, sX, rg, sStg, x_full, slice, range, n0, kb0, nkb);
      else if constexpr (kWg0)
        consume_dx<MB, DW, 3, MB - 3, 128>(p, rg, slice, range, n0, nkb);
    } else {
      consume_dx<MB, DW, 0, kDxBlocks1<MB>, 256>(p, rg, slice, range, n0, nkb);
    }
    // (The two branches meet nowhere after setmaxnreg: code both reached would be register-allocated for the
    // producer's 40.)
    if (p.ranges > 1 && p.cluster) {
      // Every CTA of the slice (its cluster) has published its partial; each sums its share in range order.
      __threadfence();  // (the cluster barrier's release already orders the partial's stores; kept as a belt)
      cluster_sync();
      reduce_units<MB>(p, slice, range, p.ranges, n0);
    }
    // Not a cluster: linear_thin_reduce_kernel, launched next on the stream, sums the partials.
  }
}

// dX from the partials of every range when the ranges are not a cluster: CTA (x, slice) of 256 threads takes units
// v = 2·x and 2·x + 1 (128 threads each, thread t the fragment thread t of the consumer warpgroup that published
// it) and sums the slice's partials in range order, as reduce_units. A programmatic dependent of the main kernel:
// it may be scheduled before that grid ends and waits here for its completion (and its memory).
template <int MB>
__global__ void __launch_bounds__(256) linear_thin_reduce_kernel(const __grid_constant__ Params p) {
  griddep_wait();
  const int slice = static_cast<int>(blockIdx.y);
  const int v = 2 * static_cast<int>(blockIdx.x) + static_cast<int>(threadIdx.x) / 128;
  const int t = static_cast<int>(threadIdx.x) % 128, warp = t / 32, lane = t % 32;
  const int fr = warp * 16 + lane / 4, fq = lane % 4, j = v / 16;
  if (v >= 16 * MB || 64 * j + fr >= p.T) return;  // both rows of the thread past T
  const float4* pu = reinterpret_cast<const float4*>(p.partial) +
                     static_cast<std::size_t>(slice) * p.ranges * MB * 2048 + v * 128 + t;
  const std::size_t stride = static_cast<std::size_t>(MB) * 2048;  // between ranges
  float4 x[kMaxRanges];
#pragma unroll
  for (int r = 0; r < kMaxRanges; ++r)
    if (r < p.ranges) x[r] = __ldcg(pu + r * stride);
  float4 a = x[0];
#pragma unroll
  for (int r = 1; r < kMaxRanges; ++r)
    if (r < p.ranges) a.x += x[r].x, a.y += x[r].y, a.z += x[r].z, a.w += x[r].w;
  const int n = slice * kBN + 8 * (v % 16) + 2 * fq;
  store_dx_pair(p, 64 * j + fr, n, a.x, a.y);
  store_dx_pair(p, 64 * j + fr + 8, n, a.z, a.w);
}

#else  // other passes of the fatbin: never launched there (the caller checks for an sm_90 device)

template <int MB, bool DW>
__global__ void linear_thin_kernel(const __grid_constant__ Maps, const __grid_constant__ Params) {
  __trap();
}
template <int MB>
__global__ void linear_thin_reduce_kernel(const __grid_constant__ Params) {
  __trap();
}

#endif

// The kernel's shared-memory opt-in (once per device).
template <int MB, bool DW>
void allow_kernel_smem() {
  allow_smem(reinterpret_cast<const void*>(linear_thin_kernel<MB, DW>), Cfg<MB, DW>::kSmem);
}

// A launch configuration in clusters of `size` CTAs along x; `attr` holds the attribute it points to.
template <int MB, bool DW>
cudaLaunchConfig_t cluster_config(int size, int grid, cudaStream_t stream, cudaLaunchAttribute& attr) {
  return cluster_launch_config(size, grid, kThreads, Cfg<MB, DW>::kSmem, stream, attr);
}

// How many clusters of `size` CTAs of the kernel can be resident at once on the current device (a cluster lies in
// one GPC: at one CTA per SM, GPCs of 16-18 SMs hold 2 clusters of 8 or 5-6 of 3); cached per device and size.
template <int MB, bool DW>
int resident_clusters(int size) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> known;
  int dev = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  allow_kernel_smem<MB, DW>();
  const std::lock_guard<std::mutex> lock(mu);
  if (const auto hit = known.find({dev, size}); hit != known.end()) return hit->second;
  cudaLaunchAttribute attr;
  const cudaLaunchConfig_t cfg = cluster_config<MB, DW>(size, size, nullptr, attr);
  int clusters = 0;
  ATTNBWD_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, linear_thin_kernel<MB, DW>, &cfg));
  known.emplace(std::make_pair(dev, size), clusters);
  return clusters;
}

// f(std::integral_constant<int, MB>{}) for the kernel form of mb = 1..4 row blocks.
template <class F>
decltype(auto) with_mb(int mb, F&& f) {
  switch (mb) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    default: throw Error("linear_thin", "plan with " + std::to_string(mb) + " row blocks");
  }
}

// f(mb, dw) for the kernel form of mb = 1..4 row blocks with dW (dw: std::true_type) or dX alone (std::false_type).
template <class F>
decltype(auto) with_form(int mb, bool dx_only, F&& f) {
  return with_mb(mb, [&](auto m) -> decltype(auto) {
    if (dx_only) return f(m, std::false_type{});
    return f(m, std::true_type{});
  });
}

template <int MB, bool DW>
void launch(const LinearBackward& p, const ThinPlan& plan, void* workspace, cudaStream_t stream, bool pdl) {
  allow_kernel_smem<MB, DW>();
  const std::int64_t T = p.tokens(), out = p.out_features, in = p.in_features;
  Maps maps{};
  maps.a = tensor_map(p.grad_output, T, out, p.ld_dy(), 64, 64 * MB);  // dY as [t][out]: boxes {64 out, 64·MB t}
  if (DW) maps.x = tensor_map(p.input, T, in, p.ld_x(), 64, 64 * MB);  // X as [t][in]: boxes {64 n, 64·MB t}
  Params prm{};
  for (int s = 0; s < kMaxSegments; ++s) prm.seg[s] = INT_MAX;
  prm.seg[0] = 0;
  if (p.segments > 1) {
    std::int64_t row = 0;
    for (int s = 0; s < p.segments; ++s) {
      prm.seg[s] = static_cast<int>(row);
      maps.w[s] = tensor_map(p.seg_weight[s], p.seg_rows[s], in, in, 64, 64);
      if (DW) maps.dw[s] = tensor_map(p.seg_grad_weight[s], p.seg_rows[s], in, in, 64, 64);
      row += p.seg_rows[s];
    }
  } else {
    maps.w[0] = tensor_map(p.weight, out, in, in, 64, 64);
    if (DW) maps.dw[0] = tensor_map(p.grad_weight, out, in, in, 64, 64);
  }
  prm.T = static_cast<int>(T), prm.in = static_cast<int>(in);
  prm.kb_total = static_cast<int>((out + kBK - 1) / kBK), prm.kb_per_range = plan.kb_per_range;
  prm.ranges = plan.ranges;
  prm.dx = static_cast<__nv_bfloat16*>(p.grad_input);
  prm.rows_per_b = static_cast<int>(p.seq_len), prm.cols_per_h = static_cast<int>(p.head_dim);
  prm.stride_b = p.heads * p.seq_len * p.head_dim, prm.stride_h = p.seq_len * p.head_dim;
  prm.partial = static_cast<float*>(workspace);
  prm.cluster = plan.cluster;
  // With plan.cluster the ranges of a slice (consecutive CTAs) are one cluster: co-scheduled, they meet at a cluster
  // barrier.
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = cluster_config<MB, DW>(plan.cluster ? plan.ranges : 1, plan.grid, stream, attr[0]);
  if (pdl) {  // a programmatic dependent of the caller's previous kernel (linear_thin_launch's contract)
    attr[1] = programmatic_dependent_attribute();
    cfg.attrs = attr, cfg.numAttrs = 2;
  }
  ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_thin_kernel<MB, DW>, maps, prm));
  ATTNBWD_CUDA_CHECK_LAUNCH();
  if (plan.ranges > 1 && !plan.cluster) {  // the partials' sum, a programmatic dependent of the main kernel
    cudaLaunchAttribute pdl = programmatic_dependent_attribute();
    cudaLaunchConfig_t rc{};
    rc.gridDim = dim3(8 * MB, static_cast<unsigned>(plan.slices));
    rc.blockDim = dim3(256);
    rc.stream = stream;
    rc.attrs = &pdl;
    rc.numAttrs = 1;
    ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&rc, linear_thin_reduce_kernel<MB>, prm));
    ATTNBWD_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

std::string linear_thin_unsupported(const LinearBackward& p) {
  if (std::string why = linear_backward_unsupported(p); !why.empty()) return why;
  if (p.tokens() > 256) return "more than 256 tokens";
  if (!aligned16(p.grad_weight) && p.segments == 1) return "weight gradient not 16-byte aligned (TMA stores)";
  return {};
}

ThinPlan linear_thin_plan(const LinearBackward& p, int sms, bool dx_only) {
  ThinPlan plan;
  plan.dx_only = dx_only;
  const std::int64_t T = p.tokens();
  plan.mb = static_cast<int>((T + 63) / 64);
  plan.slices = static_cast<int>((p.in_features + kBN - 1) / kBN);
  const int kb_total = static_cast<int>((p.out_features + kBK - 1) / kBK);
  // The most ranges (≤ 8) whose slices × ranges CTAs fit on the SMs; a cluster per slice where all of them can be
  // resident at once (a cluster that is not would wait for a second wave: twice the time), else the partials' sum by a
  // second launch.
  const int want = std::max(1, std::min({kb_total, sms / plan.slices, kMaxRanges}));
  plan.kb_per_range = (kb_total + want - 1) / want;
  plan.ranges = (kb_total + plan.kb_per_range - 1) / plan.kb_per_range;  // every range owns k-blocks
  plan.cluster = plan.ranges > 1 &&
                 with_form(plan.mb, dx_only, [&](auto mb, auto dw) { return resident_clusters<mb, dw>(plan.ranges); }) >=
                     plan.slices;
  plan.grid = plan.slices * plan.ranges;
  plan.workspace_bytes =
      plan.ranges > 1 ? static_cast<std::size_t>(plan.grid) * plan.mb * 2048 * sizeof(float) * 4 : 0;
  return plan;
}

void linear_thin_launch(const LinearBackward& p, const ThinPlan& plan, void* workspace, cudaStream_t stream,
                        bool after_own_kernel) {
  if (const std::string why = linear_thin_unsupported(p); !why.empty()) throw Error("linear_thin", why);
  // The plan is linear_thin_plan's for this problem: every range owns k-blocks, a cluster per slice.
  const int kb_total = static_cast<int>((p.out_features + kBK - 1) / kBK);
  if (plan.mb != (p.tokens() + 63) / 64 || plan.ranges < 1 || plan.ranges > kMaxRanges || plan.kb_per_range < 1 ||
      (plan.ranges - 1) * plan.kb_per_range >= kb_total || plan.ranges * plan.kb_per_range < kb_total ||
      plan.slices != (p.in_features + kBN - 1) / kBN || plan.grid != plan.slices * plan.ranges ||
      (plan.ranges > 1 && workspace == nullptr))
    fail("linear_thin_launch", __FILE__, __LINE__, "a plan that is not linear_thin_plan's for this problem");
  with_form(plan.mb, plan.dx_only, [&](auto mb, auto dw) { launch<mb, dw>(p, plan, workspace, stream, after_own_kernel); });
}

}  // namespace attnbwd::cuda::sm90
