// The backward of a bias-free linear layer Y = X·Wᵀ on sm_90a (out_proj_backward, spec §2, and the
// projections of gqa_rope_backward, spec §3): one persistent launch computes both GEMMs,
//   dX: [T, in]   = dY · W       written straight into its [B, H, S, D] layout (head split)
//   dW: [out, in] = dYᵀ · X      summed over the T tokens
// bf16 operands, fp32 accumulation, one rounding per output (as the reference's fp32 GEMMs on upcast
// operands: bf16 products are exact in fp32).
//
// Kernel: 3 warpgroups. Warpgroup 0 (one thread) streams 128x64 A and 64x256 B tiles with TMA (128-byte
// swizzle) into a 4-stage shared-memory ring guarded by mbarriers; warpgroups 1 and 2 each own 64 rows
// of the 128x256 output tile and run wgmma m64n256k16 (fp32 accumulators in registers) on the ring.
// Epilogue (TMA-stored outputs): each consumer warpgroup converts its 64-column chunks to bf16 into two staging
// buffers and hands each to a store thread of warpgroup 0 (warps 1 and 2), which issues the TMA store and frees the
// buffer once the store has read it; the consumers never wait for a store issue (perf/NOTES.md, twenty-seventh
// session: the epilogue 3.3-4.6 K cycles per unit before, with all 256 consumer threads waiting on one issuing thread).
// Operand majorness: dX has A = dY K-major, B = W N-major; dW has A = dYᵀ M-major (dY is [T, out]),
// B = X N-major. Both N-major/M-major cases use wgmma's transpose bits.
//
// dX in 128x128 tiles (Params::dx_n128, out_proj's small-T plans: LinearBackwardPlan::dx_tile_n): the dX roles as
// their own instantiation (m64n128k16 products, 64 accumulators per thread, the co-resident reduction with at most 2
// splits), the ring as 6 stages of 32 KB in the same shared memory (kStagesOf), so that W's stream from DRAM keeps up
// with products that take half as long per k-block (perf/NOTES.md, thirtieth session).
//
// Work units: every (GEMM, 128x256 tile, K range). The host picks how many K ranges (split-K) each GEMM
// gets so that the units of both GEMMs, longest first, dealt round-robin to one CTA per SM, finish
// together (small T: dX has few tiles but K = out; dW has many tiles with K = T). Split-K partials are
// fp32 in the workspace. dX's splits (SplitReduce::Cluster, and CoResident) are 2 or 4 CTAs resident together
// (one thread-block cluster, or consecutive CTAs of a cooperative launch, whose whole grid is resident): each
// publishes the part of its partial the others own, they meet on the tile's counter, and each sums and stores a
// half or quarter of the tile. Otherwise (dW, and dX with SplitReduce::LastArrival) the last unit of a tile to
// arrive (per-tile counter) sums all partials in split order and stores the bf16 result. Both orders are fixed:
// the results are deterministic.
//
// Grouped launches (LinearBackward::segments > 1, gqa's q/k/v projections): W and dW are up to three row
// blocks in separate allocations. They run in their own kernel instantiation (linear_backward_grouped_kernel,
// the ungrouped kernel's code untouched): the producer of dX picks the weight's tensor map per 64-row
// k-block, the dW epilogue the gradient's map per 64-row slice; the work split is the ungrouped one.
#include "linear_backward_sm90.hpp"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <string>
#include <vector>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "griddep.cuh"
#include "sm90/ptx.cuh"
#include "sm90/stage.cuh"

namespace attnbwd::cuda::sm90 {
namespace {

#ifndef ATTNBWD_SM90_LINEAR_STAGES  // tuning knobs (perf/NOTES.md); the defaults are the measured best
#define ATTNBWD_SM90_LINEAR_STAGES 4
#endif
#ifndef ATTNBWD_SM90_LINEAR_STAGING_BUFS
#define ATTNBWD_SM90_LINEAR_STAGING_BUFS 2
#endif
constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = ATTNBWD_SM90_LINEAR_STAGES;
constexpr int kThreads = 384;                     // producer warpgroup + 2 consumer warpgroups
constexpr int kABytes = kBM * kBK * 2;            // 16 KB
constexpr int kBBytes = kBK * kBN * 2;            // 32 KB
constexpr int kStageBytes = kABytes + kBBytes;    // 48 KB
// The ring of a role with BN-column tiles: the same shared memory in stages of its own size, so 128-column dX tiles
// (32 KB stages) keep 6 k-blocks in flight instead of 4 (their products take half as long per k-block, and at 4
// stages the W stream from DRAM could not keep up: perf/NOTES.md, thirtieth session).
template <int BN>
constexpr int kStageBytesOf = kABytes + kBK * BN * 2;
template <int BN>
constexpr int kStagesOf = kStages * kStageBytes / kStageBytesOf<BN>;
constexpr int kMaxStages = kStagesOf<128>;
[[maybe_unused]] constexpr int kChunkBytes = 64 * 64 * 2;  // one 64x64 TMA box, 8 KB
// Epilogue staging: per consumer warpgroup kStagingBufs buffers of 64 rows x 64 bf16 columns in the TMA box
// layout with the 128-byte swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), which also makes
// the fragment's 4-byte writes (8 rows x 4 lanes per instruction) hit 32 distinct banks.
constexpr int kStagingBuf = 64 * 128;
constexpr int kStagingBufs = ATTNBWD_SM90_LINEAR_STAGING_BUFS;

// ATTNBWD_SM90_LINEAR_TRACE=1 (a diagnostic build, off by default; no code of it in other builds): the first consumer
// thread of each CTA stamps clock64 at its phase boundaries (codes below) and the CTA's start on %globaltimer; the
// launch then waits for the kernel and prints one line per CTA to stderr (not under stream capture: run with
// ATTNBWD_CUDA_GRAPHS=0). For perf/NOTES.md's count of this kernel at small T (twenty-sixth session).
#ifndef ATTNBWD_SM90_LINEAR_TRACE
#define ATTNBWD_SM90_LINEAR_TRACE 0
#endif
#if ATTNBWD_SM90_LINEAR_TRACE
constexpr int kTraceCtas = 1024, kTraceEvents = 128;
// Event codes: 1 consume start, 2 a unit's first stage full, 3 its products done, 4 its result stored, 5 split-K
// partial published, 6 the tile's CTAs met, 7 the peers' partials summed, 9 consume end; in a TMA-stored chunk of 64
// columns: 10 its staging buffer free, 11 staged and handed to the store thread.
__device__ unsigned long long g_trace[kTraceCtas][kTraceEvents];  // (code << 56) | (clock64 − start)
__device__ unsigned long long g_trace_start[kTraceCtas];            // %globaltimer at consume start (ns)
__device__ int g_trace_units[kTraceCtas];                           // events recorded
struct Trace {
  long long c0 = 0;
  int n = 0;
  template <int = 0>
  __device__ void start() {
    if (threadIdx.x != 128 || blockIdx.x >= kTraceCtas) return;
    unsigned long long ns;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    g_trace_start[blockIdx.x] = ns;
    c0 = clock64();
    mark(1);
  }
  template <int = 0>
  __device__ void mark(int code) {
    if (threadIdx.x != 128 || blockIdx.x >= kTraceCtas || n >= kTraceEvents) return;
    g_trace[blockIdx.x][n++] = (static_cast<unsigned long long>(code) << 56) | static_cast<unsigned long long>(clock64() - c0);
    g_trace_units[blockIdx.x] = n;
  }
};
#else
struct Trace {  // no code (templates: nothing to warn about when unused)
  template <int = 0>
  __device__ void start() {}
  template <int = 0>
  __device__ void mark(int) {}
};
#endif
constexpr int kStagingBytes = kStagingBufs * kStagingBuf;  // per warpgroup
// The barrier area: the ring's full and empty barriers, the staging buffers' full and empty barriers and store jobs
// (per consumer warpgroup and buffer), the last-arrival flag; in whole 256-byte blocks (256 with the default knobs).
constexpr int kBarrierBytes = ((2 * kMaxStages + 4 * kStagingBufs) * 8 + 2 * kStagingBufs * 16 + 4 + 255) / 256 * 256;
constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStagingBytes + 1024 /*alignment*/ + kBarrierBytes;
static_assert(kSmemBytes <= 227 * 1024, "shared memory of one H100/H200 CTA");

// One GEMM of the launch: C[M, N] = Σ_k A[m, k] B[k, n], stored at
//   out[(m / rows_per_b)·stride_b + (m % rows_per_b)·stride_r + (n / cols_per_h)·stride_h + n % cols_per_h].
struct GemmDesc {
  int M, N, kb_total;  // kb_total = ceil(K / 64)
  int tiles_n, splits, kb_per_split, units;
  int a_kmajor;
  __nv_bfloat16* out;
  int rows_per_b, cols_per_h;  // rows per batch element, columns per head
  int vec16;                   // 8-column groups are contiguous and 16-byte aligned in `out`
  int tma_store;               // 64x64 blocks of the tile are boxes of the output tensor map
  int heads;                   // output map: z = (m / rows_per_b)·heads + n / cols_per_h
  long long stride_b, stride_r, stride_h;
  float* partial;      // [tiles][splits][128 x tile columns] when splits > 1
  unsigned* counters;  // [tiles]
  int cluster_reduce;  // splits > 1: the splits of a tile are resident together (one cluster, or a cooperative
                       // launch) and reduce together
};

struct Params {
  GemmDesc dx, dw;
  int ctas_dx;  // CTAs [0, ctas_dx) take dX units, the others dW units
  int dx_n128;  // dX tiles of 128 x 128 (ungrouped launches with the co-resident reduction; at most 2 splits)
};

// A grouped launch's extra tensor maps and segment starts: the first row of out_features in segments 1 and
// 2 (multiples of 64; INT_MAX where there is no such segment). dX's B operand (per 64-row k-block) and
// dW's output (per 64-row slice of a consumer warpgroup) switch tensor maps there.
struct Segments {
  const CUtensorMap *b_dx1, *b_dx2, *out_dw1, *out_dw2;
  int seg1, seg2;
};

struct Unit {
  int tm, tn, tile, split, kb0, kb1;
};

[[maybe_unused]] __device__ __forceinline__ Unit decode(const GemmDesc& g, int idx) {
  Unit w;
  w.split = idx % g.splits;
  w.tile = idx / g.splits;
  w.tm = w.tile / g.tiles_n;
  w.tn = w.tile % g.tiles_n;
  w.kb0 = w.split * g.kb_per_split;
  w.kb1 = min(w.kb0 + g.kb_per_split, g.kb_total);
  return w;
}

#if defined(ATTNBWD_SM90_DEVICE)

// Stores this thread's accumulator fragment as bf16 pairs: rows row0 and row0 + 8, columns
// col0 + 8·j (j < 32) and the next one. Only 32-bit divisions, two per call: the head index of the
// columns advances incrementally (64-bit divisions per element cost more than the whole mainloop).
// Only the 8-column groups j in [j0, j1) (a split-K CTA of a cluster stores its share of the tile).
template <int R>
__device__ __forceinline__ void store_tile(const GemmDesc& g, const float (&acc)[R], int row0, int col0, int j0,
                                           int j1) {
  long long roff[2];
  bool rok[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + 8 * half;
    rok[half] = row < g.M;
    const int rb = row / g.rows_per_b;
    roff[half] = rb * g.stride_b + static_cast<long long>(row - rb * g.rows_per_b) * g.stride_r;
  }
  int h = col0 / g.cols_per_h;
  int c = col0 - h * g.cols_per_h;
#pragma unroll
  for (int j = 0; j < R / 4; ++j) {
    if (j >= j0 && j < j1 && col0 + 8 * j < g.N) {
      const long long coff = h * g.stride_h + c;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (!rok[half]) continue;
        *reinterpret_cast<__nv_bfloat162*>(g.out + roff[half] + coff) =
            __floats2bfloat162_rn(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
      }
    }
    c += 8;
    while (c >= g.cols_per_h) c -= g.cols_per_h, ++h;
  }
}

struct Smem {
  std::uint8_t* tiles;
  std::uint8_t* staging;  // per consumer warpgroup: kStagingBytes
  std::uint64_t *full, *empty;
  // Per consumer warpgroup ci and staging buffer b (index ci·kStagingBufs + b): the buffer staged (sfull, 128
  // arrivals: every thread of the warpgroup after its fence) and read by its TMA store (sempty, the store thread's
  // arrival); jobs[ci·kStagingBufs + b]: the store's coordinates (x, y, z) and map (w: 0 the GEMM's output map, 1 / 2
  // a grouped launch's dW segment 1 / 2; -1: the warpgroup has no more chunks).
  std::uint64_t *sfull, *sempty;
  int4* jobs;
  unsigned* flag;
};

// g.tma_store: chunk Q of store_slice's TMA path (staged, handed to the store thread; cx, cy, cz its coordinates).
template <int Q, int R>
__device__ __forceinline__ void tma_chunk(const GemmDesc& g, int map_sel, const float (&acc)[R], int col_base,
                                          std::uint8_t* stg, int& nj, int q0, int q1, const Smem& sm, int& cx, int cy,
                                          int& cz, Trace& tr) {
  if (col_base + 64 * Q >= g.N) return;
  if (Q > 0) {  // the next 64 columns (a head holds whole 64-column blocks here)
    cx += 64;
    if (cx >= g.cols_per_h) cx -= g.cols_per_h, ++cz;
  }
  if (Q < q0 || Q >= q1) return;
  const int ci = threadIdx.x / 128 - 1, slot = ci * kStagingBufs + nj % kStagingBufs;
  std::uint8_t* b = stg + (nj % kStagingBufs) * kStagingBuf;
  mbar_wait(&sm.sempty[slot], ((nj / kStagingBufs) & 1) ^ 1);  // its last store has read it
  tr.mark(10);
  stage_chunk<Q, R>(acc, b);
  fence_proxy_async_smem();
  if (threadIdx.x % 128 == 0) sm.jobs[slot] = make_int4(cx, cy, cz, map_sel);
  mbar_arrive(&sm.sfull[slot]);
  ++nj;
  tr.mark(11);
}

// Stores this warpgroup's 64x256 slice of the tile (rows row_base.., columns col_base..), 64 columns at a time
// through the staging buffers. With g.tma_store the warpgroup only stages each chunk (bf16, the TMA box layout) and
// hands it to its store thread (store_chunks), which issues the TMA store while the warpgroup goes on to the next
// chunk or unit; else (g.vec16) every thread stores 16-byte pieces. Only the 64-column chunks q in [q0, q1) (a
// split-K CTA of a cluster stores its share of the tile). The TMA path is four tma_chunk<Q> calls ahead of the 16-byte
// path's loop, so that its code is contiguous (+2.3 % on out_proj on an H200: perf/NOTES.md, twenty-eighth session).
// map_sel: the output map (Smem::jobs); c0: tma_coords of the slice.
// nj: the warpgroup's chunks staged so far (TMA path); buf: the next staging buffer (16-byte path).
template <int R>
__device__ __forceinline__ void store_slice(const GemmDesc& g, int map_sel, const float (&acc)[R],
                                            int row_base, int col_base, std::uint8_t* stg, int barrier_id, int& buf,
                                            int& nj, int q0, int q1, const Smem& sm, int3 c0, Trace& tr) {
  if (row_base >= g.M) return;
  if (g.tma_store) {
    int cx = c0.x, cz = c0.z;
    tma_chunk<0, R>(g, map_sel, acc, col_base, stg, nj, q0, q1, sm, cx, c0.y, cz, tr);
    tma_chunk<1, R>(g, map_sel, acc, col_base, stg, nj, q0, q1, sm, cx, c0.y, cz, tr);
    if constexpr (R == 128) {
      tma_chunk<2, R>(g, map_sel, acc, col_base, stg, nj, q0, q1, sm, cx, c0.y, cz, tr);
      tma_chunk<3, R>(g, map_sel, acc, col_base, stg, nj, q0, q1, sm, cx, c0.y, cz, tr);
    }
    return;
  }
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int q = 0; q < R / 32; ++q) {
    const int col = col_base + 64 * q;
    if (col >= g.N) break;
    if (q < q0 || q >= q1) continue;
    std::uint8_t* b = stg + buf * kStagingBuf;
    named_barrier(barrier_id, 128);
    if (q == 0) stage_chunk<0, R>(acc, b);
    if (q == 1) stage_chunk<1, R>(acc, b);
    if constexpr (R == 128) {
      if (q == 2) stage_chunk<2, R>(acc, b);
      if (q == 3) stage_chunk<3, R>(acc, b);
    }
    named_barrier(barrier_id, 128);
#pragma unroll
    for (int it = 0; it < 4; ++it) {
      const int idx = it * 128 + t, r = idx / 8, c = idx % 8;
      const int row = row_base + r, cc = col + 8 * c;
      if (row < g.M && cc < g.N) {
        const uint4 v = *reinterpret_cast<const uint4*>(b + r * 128 + ((c ^ (r % 8)) * 16));
        const int rb = row / g.rows_per_b, ch = cc / g.cols_per_h;
        const long long off = rb * g.stride_b + static_cast<long long>(row - rb * g.rows_per_b) * g.stride_r +
                              ch * g.stride_h + (cc - ch * g.cols_per_h);
        *reinterpret_cast<uint4*>(g.out + off) = v;
      }
    }
    buf = (buf + 1) % kStagingBufs;
  }
}

// The TMA coordinates of the first 64x64 box of a warpgroup's slice (rows row_base.., columns col_base..) in the
// output map whose segment starts at row row_shift (grouped dW), else 0.
__device__ __forceinline__ int3 tma_coords(const GemmDesc& g, int row_base, int col_base, int row_shift) {
  const int rs = row_base - row_shift, rb = rs / g.rows_per_b, ch = col_base / g.cols_per_h;
  return make_int3(col_base - ch * g.cols_per_h, rs - rb * g.rows_per_b, rb * g.heads + ch);
}

// g.tma_store: the end of consumer warpgroup ci's chunks (a job with map -1, in the next buffer once it is free).
__device__ __forceinline__ void end_chunks(const GemmDesc& g, int nj, const Smem& sm) {
  if (!g.tma_store) return;
  const int ci = threadIdx.x / 128 - 1, slot = ci * kStagingBufs + nj % kStagingBufs;
  mbar_wait(&sm.sempty[slot], ((nj / kStagingBufs) & 1) ^ 1);
  if (threadIdx.x % 128 == 0) sm.jobs[slot] = make_int4(0, 0, 0, -1);
  mbar_arrive(&sm.sfull[slot]);
}

// The store thread of consumer warpgroup ci (g.tma_store): issues the TMA store of each chunk the warpgroup stages,
// in order, and frees its buffer as soon as the store has read it (the warpgroup stages the next chunk meanwhile);
// returns after the warpgroup's last chunk, its stores' reads done (the staging must outlive them; the global writes
// complete on their own).
__device__ __forceinline__ void store_chunks(int ci, const CUtensorMap* map0, const CUtensorMap* map1,
                                             const CUtensorMap* map2, const Smem& sm) {
  std::uint8_t* stg = sm.staging + ci * kStagingBytes;
  for (int n = 0;; ++n) {
    const int b = n % kStagingBufs, slot = ci * kStagingBufs + b;
    mbar_wait(&sm.sfull[slot], (n / kStagingBufs) & 1);
    const int4 j = sm.jobs[slot];
    if (j.w < 0) break;
    tma_store_3d(j.w == 0 ? map0 : j.w == 1 ? map1 : map2, stg + b * kStagingBuf, j.x, j.y, j.z);
    bulk_commit();
    bulk_wait_read<0>();
    mbar_arrive(&sm.sempty[slot]);
  }
}

// Producer: one thread streams the k-blocks of this CTA's units (cta, cta + ncta, ...) of GEMM g.
// Grouped (dX of a grouped launch): B's rows from sg.seg1 (seg2) on come from sg.b_dx1 (b_dx2), counted from
// the segment's first row.
// BN: the tile's columns (256; 128 for dX under Params::dx_n128).
template <bool Grouped, int BN>
__device__ __forceinline__ void produce(const GemmDesc& g, const CUtensorMap* ma, const CUtensorMap* mb,
                                        const Segments& sg, int cta, int ncta, const Smem& sm) {
  int stage = 0;
  std::uint32_t phase = 0;
  for (int u = cta; u < g.units; u += ncta) {
    const Unit w = decode(g, u);
    for (int kb = w.kb0; kb < w.kb1; ++kb) {
      mbar_wait(&sm.empty[stage], phase ^ 1);
      std::uint8_t* sa = sm.tiles + stage * kStageBytesOf<BN>;
      std::uint8_t* sb = sa + kABytes;
      mbar_arrive_expect_tx(&sm.full[stage], kStageBytesOf<BN>);
      if (g.a_kmajor) {
        tma_load_2d(sa, ma, &sm.full[stage], kb * kBK, w.tm * kBM);  // box {64 k, 128 m}
      } else {
#pragma unroll
        for (int c = 0; c < kBM / 64; ++c)  // box {64 m, 64 k}
          tma_load_2d(sa + c * kChunkBytes, ma, &sm.full[stage], w.tm * kBM + 64 * c, kb * kBK);
      }
      const int k = kb * kBK;
      const CUtensorMap* m = mb;
      int kr = k;
      if constexpr (Grouped) {
        m = k >= sg.seg2 ? sg.b_dx2 : k >= sg.seg1 ? sg.b_dx1 : mb;
        kr = k >= sg.seg2 ? k - sg.seg2 : k >= sg.seg1 ? k - sg.seg1 : k;
      }
#pragma unroll
      for (int c = 0; c < BN / 64; ++c)  // box {64 n, 64 k}
        tma_load_2d(sb + c * kChunkBytes, m, &sm.full[stage], w.tn * BN + 64 * c, kr);
      if (++stage == kStagesOf<BN>) stage = 0, phase ^= 1;
    }
  }
}

// Consumer warpgroup `ci` (rows 64·ci.. of each tile): wgmma over the ring, then the epilogue.
// TransA: 0 = A K-major (dX), 1 = A M-major (dW). One instantiation per CTA, so no branch separates
// the wgmma instructions of a CTA (ptxas serialises wgmma behind branches it cannot prove uniform).
// ClusterReduce: split-K summed by the tile's co-resident CTAs (g.cluster_reduce: a cluster, or a cooperative
// launch); a separate instantiation, so
// the code of the other paths stays as it was (measured on an H200: with the cluster branch in the same
// instantiation every unsplit call took ~1.6 µs longer; as its own instantiation, 0.991-1.001x of main).
// Grouped (dW of a grouped launch): rows from sg.seg1 (seg2) on are stored through sg.out_dw1 (out_dw2),
// counted from the segment's first row.
// BN: the tile's columns, 256 (m64n256k16 products, 128 accumulators per thread) or 128 (dX under Params::dx_n128:
// m64n128k16, 64 accumulators; with ClusterReduce only, at most 2 splits).
template <int TransA, bool ClusterReduce, bool Grouped, int BN>
__device__ __forceinline__ void consume(const GemmDesc& g, const Segments& sg, int cta, int ncta, const Smem& sm) {
  static_assert(BN == 256 || (BN == 128 && ClusterReduce && !Grouped), "n128 tiles: dX with ClusterReduce only");
  constexpr int R = BN / 2, NJ = BN / 8, NQ = BN / 64;  // accumulators, 8-column groups, 64-column chunks
  constexpr int kTile = kBM * BN;                       // fp32 partial of one tile
  const int ci = threadIdx.x / 128 - 1;
  const int t = threadIdx.x % 128;   // thread in warpgroup
  const int ct = threadIdx.x - 128;  // thread among the 256 consumers
  const bool leader = t == 0;
  const int warp = t / 32, lane = t % 32;
  float acc[R];
  int stage = 0, buf = 0, nj = 0;
  std::uint32_t phase = 0;
  Trace tr;
  tr.start();
  for (int u = cta; u < g.units; u += ncta) {
    const Unit w = decode(g, u);
    // The output map and the first box's coordinates of this warpgroup's slice, ahead of the products.
    int sel = 0, shift = 0;
    if constexpr (Grouped) {
      const int r = w.tm * kBM + ci * 64;  // segments start at multiples of 64: this slice is in one
      sel = r >= sg.seg2 ? 2 : r >= sg.seg1 ? 1 : 0;
      shift = r >= sg.seg2 ? sg.seg2 : r >= sg.seg1 ? sg.seg1 : 0;
    }
    const int3 c0 = g.tma_store ? tma_coords(g, w.tm * kBM + ci * 64, w.tn * BN, shift) : make_int3(0, 0, 0);
    fence_regs(acc);
    int prev = -1;
    for (int kb = w.kb0; kb < w.kb1; ++kb) {
      mbar_wait(&sm.full[stage], phase);
      if (kb == w.kb0) tr.mark(2);
      const std::uint32_t sa = smem_addr(sm.tiles + stage * kStageBytesOf<BN>);
      const std::uint32_t sb = sa + kABytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const std::uint64_t da = TransA == 0 ? smem_desc(sa + ci * 64 * 128 + 32 * kk, 16, 1024)
                                             : smem_desc(sa + ci * kChunkBytes + 2048 * kk, kChunkBytes, 1024);
        if constexpr (BN == 256)
          wgmma_m64n256k16_bf16<TransA, 1>(acc, da, smem_desc(sb + 2048 * kk, kChunkBytes, 1024),
                                           kb > w.kb0 || kk > 0);
        else
          wgmma_m64n128k16_bf16<TransA>(acc, da, smem_desc(sb + 2048 * kk, kChunkBytes, 1024), kb > w.kb0 || kk > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous k-block's MMAs are done: release its stage
      if (prev >= 0 && leader) mbar_arrive(&sm.empty[prev]);
      prev = stage;
      if (++stage == kStagesOf<BN>) stage = 0, phase ^= 1;
    }
    wgmma_wait<0>();
    fence_regs(acc);
    if (prev >= 0 && leader) mbar_arrive(&sm.empty[prev]);
    tr.mark(3);

    const int row0 = w.tm * kBM + ci * 64 + warp * 16 + lane / 4;
    const int col0 = w.tn * BN + 2 * (lane % 4);
    // Stores the 64-column chunks [q0, q1) of the tile.
    auto store = [&](int q0, int q1) {
      if (g.tma_store || g.vec16)
        store_slice(g, sel, acc, w.tm * kBM + ci * 64, w.tn * BN, sm.staging + ci * kStagingBytes, 2 + ci, buf, nj,
                    q0, q1, sm, c0, tr);
      else
        store_tile(g, acc, row0, col0, 8 * q0, 8 * q1);
    };
    if (g.splits == 1) {
      store(0, NQ);
      tr.mark(4);
      continue;
    }
    if constexpr (ClusterReduce) {
      // Split-K by the g.splits consecutive CTAs of this tile (co-resident: one cluster, or a cooperative grid
      // with ctas_dx a multiple of the splits, so a tile's splits are in the same round of each; split = rank):
      // CTA `split` owns the 64-column chunks [q0, q1) of the tile. Each CTA publishes the rest of its partial
      // (fp32, fragment order), the CTAs meet on the tile's counter (a spin that cannot deadlock: the tile's
      // CTAs run together), and each adds the others' partials, in split order, to its own
      // registers (a fixed order per element: deterministic) and stores its chunks. Traffic per CTA:
      // (splits-1)/splits of a tile each way, against all `splits` partials through one SM for the
      // last-arrival reduction below.
      const int per = NQ / g.splits, q0 = w.split * per, q1 = q0 + per;
      float* part = g.partial + static_cast<std::size_t>(w.tile) * g.splits * kTile;
      float4* mine = reinterpret_cast<float4*>(part + static_cast<std::size_t>(w.split) * kTile);
#pragma unroll
      for (int j = 0; j < NJ; ++j)
        if (j < 8 * q0 || j >= 8 * q1)
          __stcg(mine + j * 256 + ct, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
      __threadfence();
      tr.mark(5);
      named_barrier(1, 256);
      if (ct == 0) {
        unsigned* cnt = &g.counters[w.tile];
        atomicAdd(cnt, 1u);
        while (ld_acquire_gpu(cnt) < static_cast<unsigned>(g.splits)) {
        }
        // Every CTA of the tile is past its wait once all have added again: the last resets the counter.
        if (atomicAdd(cnt, 1u) == static_cast<unsigned>(2 * g.splits - 1)) *cnt = 0;
      }
      named_barrier(1, 256);
      tr.mark(6);
#pragma unroll
      for (int q = 0; q < NQ; ++q) {  // a chunk (8 loads in flight) at a time: acc already holds R registers
        if (q < q0 || q >= q1) continue;
#pragma unroll 1
        for (int k = 0; k < g.splits; ++k) {
          if (k == w.split) continue;
          const float4* pk = reinterpret_cast<const float4*>(part + static_cast<std::size_t>(k) * kTile);
          float4 v[8];
#pragma unroll
          for (int jj = 0; jj < 8; ++jj) v[jj] = __ldcg(pk + (8 * q + jj) * 256 + ct);
#pragma unroll
          for (int jj = 0; jj < 8; ++jj) {
            const int j = 8 * q + jj;
            acc[4 * j] += v[jj].x, acc[4 * j + 1] += v[jj].y, acc[4 * j + 2] += v[jj].z, acc[4 * j + 3] += v[jj].w;
          }
        }
      }
      tr.mark(7);
      store(q0, q1);
      tr.mark(4);
      continue;
    }
    // Split-K: publish this unit's partial, count arrivals; the last one reduces in split order.
    float* part = g.partial + static_cast<std::size_t>(w.tile) * g.splits * kTile;
    float4* mine = reinterpret_cast<float4*>(part + static_cast<std::size_t>(w.split) * kTile);
#pragma unroll
    for (int j = 0; j < NJ; ++j)
      __stcg(mine + j * 256 + ct, make_float4(acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]));
    __threadfence();
    named_barrier(1, 256);
    if (ct == 0) *sm.flag = atomicAdd(&g.counters[w.tile], 1u);
    named_barrier(1, 256);
    if (*sm.flag != static_cast<unsigned>(g.splits - 1)) continue;
    __threadfence();
    // Sum in split order; each pass has its 32 loads in flight together.
    const float4* parts = reinterpret_cast<const float4*>(part);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const float4 v = __ldcg(parts + j * 256 + ct);
      acc[4 * j] = v.x, acc[4 * j + 1] = v.y, acc[4 * j + 2] = v.z, acc[4 * j + 3] = v.w;
    }
    for (int k = 1; k < g.splits; ++k) {
      const float4* pk = parts + static_cast<std::size_t>(k) * (kTile / 4);
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const float4 v = __ldcg(pk + j * 256 + ct);
        acc[4 * j] += v.x, acc[4 * j + 1] += v.y, acc[4 * j + 2] += v.z, acc[4 * j + 3] += v.w;
      }
    }
    store(0, NQ);
    tr.mark(4);
    if (ct == 0) g.counters[w.tile] = 0;  // ready for the next call
  }
  end_chunks(g, nj, sm);  // the store thread waits for its stores' reads
  tr.mark(9);
}

// CTAs [0, ctas_dx) work on dX units, the rest on dW units. Grouped: a grouped launch (sg's maps and
// segments); else sg is unused, and the code is the ungrouped kernel's alone.
template <bool Grouped>
__device__ __forceinline__ void kernel_body(const CUtensorMap* map_a_dx, const CUtensorMap* map_b_dx,
                                            const CUtensorMap* map_a_dw, const CUtensorMap* map_b_dw,
                                            const CUtensorMap* map_out_dx, const CUtensorMap* map_out_dw,
                                            const Segments& sg, const Params& p) {
  extern __shared__ std::uint8_t smem_raw[];
  Smem sm;
  // The first 1024-byte boundary, as an offset added to the shared pointer (not an integer round trip,
  // which would lose the address space and make every staging access a generic ld/st): sm90::align_smem_1024
  // spelled out, because calling it changes this kernel's PTX (+34 integer ops of address folding, not
  // timed on a GPU), while the measured code is this one.
  sm.tiles = smem_raw + ((1024u - (static_cast<unsigned>(__cvta_generic_to_shared(smem_raw)) & 1023u)) & 1023u);
  sm.staging = sm.tiles + kStages * kStageBytes;
  sm.full = reinterpret_cast<std::uint64_t*>(sm.staging + 2 * kStagingBytes);
  sm.empty = sm.full + kMaxStages;
  sm.sfull = sm.empty + kMaxStages;
  sm.sempty = sm.sfull + 2 * kStagingBufs;
  sm.jobs = reinterpret_cast<int4*>(sm.sempty + 2 * kStagingBufs);
  sm.flag = reinterpret_cast<unsigned*>(sm.jobs + 2 * kStagingBufs);

  const bool is_dx = static_cast<int>(blockIdx.x) < p.ctas_dx;
  const GemmDesc& g = is_dx ? p.dx : p.dw;
  const int cta = is_dx ? blockIdx.x : blockIdx.x - p.ctas_dx;
  const int ncta = is_dx ? p.ctas_dx : gridDim.x - p.ctas_dx;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kMaxStages; ++s) {
      mbar_init(&sm.full[s], 1);
      mbar_init(&sm.empty[s], 2);  // one arrival per consumer warpgroup
    }
    for (int i = 0; i < 2 * kStagingBufs; ++i) {
      mbar_init(&sm.sfull[i], 128);  // every thread of the consumer warpgroup, after its fence
      mbar_init(&sm.sempty[i], 1);   // the store thread
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      // grad_output may be the previous kernel's output (a programmatic dependent launch: linear_backward_launch's
      // after_own_kernel); without the launch attribute this returns at once.
      griddep_wait();
      if (!Grouped && is_dx && p.dx_n128)
        produce<false, 128>(g, map_a_dx, map_b_dx, sg, cta, ncta, sm);
      else if (is_dx)
        produce<Grouped, 256>(g, map_a_dx, map_b_dx, sg, cta, ncta, sm);
      else
        produce<false, 256>(g, map_a_dw, map_b_dw, sg, cta, ncta, sm);
    } else if ((threadIdx.x == 32 || threadIdx.x == 64) && g.tma_store) {  // the store threads (warps 1 and 2)
      if (is_dx)
        store_chunks(threadIdx.x / 32 - 1, map_out_dx, map_out_dx, map_out_dx, sm);
      else if constexpr (Grouped)
        store_chunks(threadIdx.x / 32 - 1, map_out_dw, sg.out_dw1, sg.out_dw2, sm);
      else
        store_chunks(threadIdx.x / 32 - 1, map_out_dw, map_out_dw, map_out_dw, sm);
    }
  } else {
    setmaxnreg_inc<232>();
    if (!Grouped && is_dx && p.dx_n128)
      consume<0, true, false, 128>(g, sg, cta, ncta, sm);
    else if (is_dx && g.cluster_reduce)
      consume<0, true, false, 256>(g, sg, cta, ncta, sm);
    else if (is_dx)
      consume<0, false, false, 256>(g, sg, cta, ncta, sm);
    else
      consume<1, false, Grouped, 256>(g, sg, cta, ncta, sm);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    linear_backward_kernel(const __grid_constant__ CUtensorMap map_a_dx, const __grid_constant__ CUtensorMap map_b_dx,
                    const __grid_constant__ CUtensorMap map_a_dw, const __grid_constant__ CUtensorMap map_b_dw,
                    const __grid_constant__ CUtensorMap map_out_dx, const __grid_constant__ CUtensorMap map_out_dw,
                    const __grid_constant__ Params p) {
  kernel_body<false>(&map_a_dx, &map_b_dx, &map_a_dw, &map_b_dw, &map_out_dx, &map_out_dw, Segments{}, p);
}

// The grouped launch (LinearBackward::segments > 1): W and dW in up to three row segments.
__global__ void __launch_bounds__(kThreads, 1)
    linear_backward_grouped_kernel(const __grid_constant__ CUtensorMap map_a_dx,
                                   const __grid_constant__ CUtensorMap map_b_dx,
                                   const __grid_constant__ CUtensorMap map_a_dw,
                                   const __grid_constant__ CUtensorMap map_b_dw,
                                   const __grid_constant__ CUtensorMap map_out_dx,
                                   const __grid_constant__ CUtensorMap map_out_dw,
                                   const __grid_constant__ CUtensorMap map_b_dx1,
                                   const __grid_constant__ CUtensorMap map_b_dx2,
                                   const __grid_constant__ CUtensorMap map_out_dw1,
                                   const __grid_constant__ CUtensorMap map_out_dw2, const __grid_constant__ Params p,
                                   int seg1, int seg2) {
  const Segments sg{&map_b_dx1, &map_b_dx2, &map_out_dw1, &map_out_dw2, seg1, seg2};
  kernel_body<true>(&map_a_dx, &map_b_dx, &map_a_dw, &map_b_dw, &map_out_dx, &map_out_dw, sg, p);
}

#else  // not the sm_90a pass: the host never launches this kernel on other archs

__global__ void __launch_bounds__(kThreads, 1)
    linear_backward_kernel(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                    const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                    const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                    const __grid_constant__ Params) {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}
__global__ void __launch_bounds__(kThreads, 1)
    linear_backward_grouped_kernel(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                   const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                   const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                   const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                   const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap,
                                   const __grid_constant__ Params, int, int) {
#if defined(__CUDA_ARCH__)
  __trap();
#endif
}

#endif

// ---- host ----------------------------------------------------------------------------------------------

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    ATTNBWD_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f)
      fail("cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)", __FILE__, __LINE__, "symbol not found");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// Every tensor map of the fast path: `rank` dimensions (dims[0] contiguous), strides of dims 1.. in bytes, boxes of
// `box` elements (element strides 1), no interleave, zeros for elements outside the tensor. `what` names the map
// in the error.
CUtensorMap encode(CUtensorMapDataType type, int rank, const void* base, const cuuint64_t* dims,
                   const cuuint64_t* strides_bytes, const cuuint32_t* box, CUtensorMapSwizzle swizzle,
                   CUtensorMapL2promotion promotion, const char* what) {
  CUtensorMap m{};
  const cuuint32_t estr[3] = {1, 1, 1};
  const CUresult r = encode_fn()(&m, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, strides_bytes,
                                 box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, promotion,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) fail(what, __FILE__, __LINE__, "CUresult " + std::to_string(r));
  return m;
}

// 3-D bf16 tensor [d2][d1][d0] (d0 contiguous) seen by TMA for 64x64 stores (box {64, 64, 1}).
CUtensorMap store_map(void* base, std::int64_t d0, std::int64_t d1, std::int64_t d2) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d0), static_cast<cuuint64_t>(d1), static_cast<cuuint64_t>(d2)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d0) * 2, static_cast<cuuint64_t>(d0 * d1) * 2};
  const cuuint32_t box[3] = {64, 64, 1};
  return encode(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_NONE, "cuTensorMapEncodeTiled (store)");
}

int ceil_div(std::int64_t a, std::int64_t b) { return static_cast<int>((a + b - 1) / b); }

// The fp32 split-K partial of one 128 x tile_n tile, in bytes (the kernel's kTile floats).
constexpr std::size_t partial_bytes(int tile_n) { return static_cast<std::size_t>(kBM) * tile_n * sizeof(float); }

// The kernels' shared-memory opt-in (once per device).
void allow_max_smem() {
  allow_smem(reinterpret_cast<const void*>(linear_backward_kernel), kSmemBytes);
  allow_smem(reinterpret_cast<const void*>(linear_backward_grouped_kernel), kSmemBytes);
}

// Finish time, in k-blocks of 128x256x64 (~0.7 µs on an H200 SM), of `units` equal units of `kb`
// k-blocks dealt round-robin to `ctas` CTAs. Each unit also pays a fixed cost (prologue, epilogue);
// split units pay for the fp32 partial round trip and the reduction: by the last arrival (all
// partials through one SM) or by the CTAs of a cluster together ((splits-1)/splits of a tile each way
// per CTA).
// fixed: the per-unit cost beyond its k-blocks; 1.5 for every unit but the dW units of a grouped launch, for which
// kGroupedDwFixed was fitted to measured plans (perf/NOTES.md, tenth session of 2026-12-01: gqa's q/k/v launch at
// T = 128, 131 and 256 with every plan forced, H200: its 64 KB epilogue per short unit costs ~5 k-block times).
// kbt: the time of one of the unit's k-blocks, 1 for 128x256 tiles, 0.5 for 128x128 (half the products; the split
// cost, the partial's bytes, also halves).
constexpr double kFixed = 1.5, kGroupedDwFixed = 5.0;
double finish(int units, int kb, int splits, int ctas, bool cluster, double fixed = kFixed, double kbt = 1.0) {
  const double split_cost = cluster ? 1.0 + 2.0 * (splits - 1) / splits : 1.0 + 0.75 * splits;
  const int rounds = (units + ctas - 1) / ctas;
  return rounds * (kb * kbt + fixed + (splits > 1 ? split_cost * kbt : 0.0));
}

// A launch configuration of the kernel in clusters of `size` CTAs along x; `attr` holds the cluster
// attribute the configuration points to.
cudaLaunchConfig_t cluster_config(int size, int grid, cudaStream_t stream, cudaLaunchAttribute& attr) {
  return cluster_launch_config(size, grid, kThreads, kSmemBytes, stream, attr);
}

// How many CTAs of the kernel can be resident at once when launched in clusters of `size` (1: one per
// SM), on the current device, at most `sms`; the device's count is cached per device and size (not the bound: a
// planner asked for fewer SMs than the device has gets its own bound, not the first caller's).
int resident_ctas(int size, int sms) {
  if (size == 1) return sms;
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> known;
  int dev = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  auto hit = known.find({dev, size});
  if (hit == known.end()) {
    allow_max_smem();
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = cluster_config(size, size, nullptr, attr);
    int clusters = 0;
    ATTNBWD_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, linear_backward_kernel, &cfg));
    hit = known.emplace(std::make_pair(dev, size), clusters * size).first;
  }
  return std::min(sms, hit->second);
}

}  // namespace

// 2-D bf16 row-major matrix [rows, cols] (row stride ld elements) seen by TMA, 128-byte swizzled boxes
// of box_cols x box_rows.
// A 2-D matrix [d1][d0] (row stride ld1 elements of elem_bytes) in boxes of box0 × box1, L2 promotion 256 B.
CUtensorMap map_2d(CUtensorMapDataType type, std::int64_t elem_bytes, const void* base, std::int64_t d0,
                   std::int64_t d1, std::int64_t ld1, int box0, int box1, CUtensorMapSwizzle swizzle,
                   const char* what) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(d0), static_cast<cuuint64_t>(d1)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld1 * elem_bytes)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box0), static_cast<cuuint32_t>(box1)};
  return encode(type, 2, base, dims, strides, box, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, what);
}

CUtensorMap tensor_map(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld, int box_cols,
                       int box_rows) {
  return map_2d(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, cols, rows, ld, box_cols, box_rows,
                CU_TENSOR_MAP_SWIZZLE_128B, "cuTensorMapEncodeTiled");
}

CUtensorMap tensor_map_2d_f32(const void* base, std::int64_t d0, std::int64_t d1, std::int64_t ld1, int box0,
                              int box1) {
  return map_2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, d0, d1, ld1, box0, box1, CU_TENSOR_MAP_SWIZZLE_NONE,
                "cuTensorMapEncodeTiled (2-D fp32)");
}

CUtensorMap tensor_map_3d_f16(const void* base, std::int64_t d0, std::int64_t d1, std::int64_t d2, std::int64_t ld1,
                              std::int64_t ld2, int box1) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d0), static_cast<cuuint64_t>(d1), static_cast<cuuint64_t>(d2)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld1) * 2, static_cast<cuuint64_t>(ld2) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(box1), 1};
  return encode(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, "cuTensorMapEncodeTiled (3-D fp16)");
}

std::string linear_backward_unsupported(const LinearBackward& p) {
  const std::int64_t T = p.tokens(), out = p.out_features, in = p.in_features;
  if (p.segments < 1 || p.segments > LinearBackward::kMaxSegments) return "segments not in 1..3";
  if (p.segments > 1) {
    std::int64_t rows = 0;
    for (int i = 0; i < p.segments; ++i) {
      if (!aligned16(p.seg_weight[i]) || !aligned16(p.seg_grad_weight[i]))
        return "segment weights or weight gradients not 16-byte aligned (TMA loads and stores)";
      if (p.seg_rows[i] < 1 || (i + 1 < p.segments && p.seg_rows[i] % 64 != 0))
        return "a segment other than the last not a positive multiple of 64 rows";
      rows += p.seg_rows[i];
    }
    if (rows != out) return "segment rows do not add up to out_features";
  }
  if (!aligned16(p.grad_output) || !aligned16(p.input) || (p.segments == 1 && !aligned16(p.weight)))
    return "inputs not 16-byte aligned (TMA)";
  if (reinterpret_cast<std::uintptr_t>(p.grad_input) % 4 ||
      (p.segments == 1 && reinterpret_cast<std::uintptr_t>(p.grad_weight) % 4))
    return "outputs not 4-byte aligned";
  if (out % 8 != 0 || in % 8 != 0 || p.ld_dy() % 8 != 0 || p.ld_x() % 8 != 0)
    return "features or row strides not a multiple of 8 (TMA strides are multiples of 16 bytes)";
  if (p.ld_dy() < out || p.ld_x() < in) return "row stride smaller than the row";
  if (p.heads * p.head_dim != in) return "heads x head_dim != in_features";
  if (p.head_dim % 2 != 0) return "odd head_dim (outputs are stored as bf16 pairs)";
  if (T < 1 || T > (1ll << 30) || out < 1 || in < 1 || out > (1 << 24) || in > (1 << 24))
    return "sizes outside the kernel's int range";
  return {};
}

namespace {
// The current device's SM count and whether it takes cooperative launches, queried once per device and thread (out_proj
// asks on every call at T ≤ 512: its auto plan and the launch's check).
struct DeviceLimits {
  int sms = 0;
  bool cooperative = false;
};
DeviceLimits device_limits() {
  int dev = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  thread_local std::map<int, DeviceLimits> known;
  if (const auto hit = known.find(dev); hit != known.end()) return hit->second;
  DeviceLimits d;
  int coop = 0;
  ATTNBWD_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
  ATTNBWD_CUDA_CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  d.cooperative = coop != 0;
  known.emplace(dev, d);
  return d;
}
}  // namespace

bool cooperative_launch_supported() { return device_limits().cooperative; }

LinearBackwardPlan linear_backward_plan(const LinearBackward& p, int sms, SplitReduce dx_reduce, int dx_tile_n) {
  const std::int64_t T = p.tokens(), out = p.out_features, in = p.in_features;
  // coop: the splits of a dX tile reduce together as in a cluster, in a cooperative launch of clusters of 1.
  const bool coop = dx_reduce == SplitReduce::CoResident;
  const bool cluster = dx_reduce == SplitReduce::Cluster || coop;
  const bool n128 = dx_tile_n == 128;
  if ((dx_tile_n != 128 && dx_tile_n != 256) || (n128 && (!cluster || p.segments > 1)))
    fail("linear_backward_plan", __FILE__, __LINE__,
         "dX tiles of 128 columns need an ungrouped launch with the co-resident reduction; else 256");
  int dev = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  // The search below costs ~5 µs of host time: once per shape, device and thread.
  thread_local std::map<std::tuple<std::int64_t, std::int64_t, std::int64_t, int, int, int, bool, int>,
                        LinearBackwardPlan>
      cache;
  const bool grouped = p.segments > 1;
  const auto key = std::make_tuple(T, out, in, sms, dev, static_cast<int>(dx_reduce), grouped, dx_tile_n);
  const double fixed_dw = grouped ? kGroupedDwFixed : kFixed;
  // ATTNBWD_SM90_LINEAR_PLAN="sx,sw,cx" (diagnostic, for plan measurements; cluster or cooperative reduction): dX split sx
  // ways (1, 2 or 4, by clusters), dW sw ways, cx CTAs on dX (at most its units and all but one cluster); the
  // rest of the resident CTAs on dW. The search below then keeps only that candidate. Read on every call, never
  // cached.
  const char* forced = std::getenv("ATTNBWD_SM90_LINEAR_PLAN");
  if (forced && !*forced) forced = nullptr;
  if (!forced)
    if (const auto hit = cache.find(key); hit != cache.end()) return hit->second;
  const bool force = forced && cluster;
  int fsx = 0, fsw = 0, fcx = 0;
  if (force && (std::sscanf(forced, "%d,%d,%d", &fsx, &fsw, &fcx) != 3 || (fsx != 1 && fsx != 2 && fsx != 4) ||
                fsw < 1 || fsw > 4 || fcx < fsx || fcx % fsx != 0))
    throw Error("ATTNBWD_SM90_LINEAR_PLAN",
                std::string("expected \"sx,sw,cx\" with sx in 1, 2, 4 dividing cx, got \"") + forced + "\"");
  if (force && n128 && fsx == 4)
    throw Error("ATTNBWD_SM90_LINEAR_PLAN", "dX tiles of 128 columns take at most 2 splits");
  const int tiles_dx = ceil_div(T, kBM) * ceil_div(in, dx_tile_n), kb_dx = ceil_div(out, kBK);
  const int tiles_dw = ceil_div(out, kBM) * ceil_div(in, kBN), kb_dw = ceil_div(T, kBK);
  LinearBackwardPlan best;
  double best_t = 1e300;
  // Split-K over dX reduced by a cluster: 2 or 4 splits (each CTA stores whole 64-column chunks of the
  // 256-column tile; 2 of a 128-column tile), the dX CTAs in whole clusters, the grid a whole number of clusters
  // that can all be resident at once.
  static constexpr int kClusterSplits[] = {1, 2, 4}, kLastArrivalSplits[] = {1, 2, 4, 8};
  const int* const dx_splits = cluster ? kClusterSplits : kLastArrivalSplits;
  const int n_dx_splits = n128 ? 2 : cluster ? 3 : 4;
  const double kbt = n128 ? 0.5 : 1.0;
  for (int i = 0; i < n_dx_splits; ++i) {
    const int sx = dx_splits[i];
    if (force && sx != fsx) continue;
    const int csize = cluster ? sx : 1;  // the step of dX's CTA count (a tile's splits in one round)
    const int lsize = coop ? 1 : csize;   // the launch's cluster size
    const int cap = resident_ctas(lsize, sms) / csize * csize;
    if (cap < 2 * csize) continue;
    for (int sw : {1, 2, 4}) {
      if (force && sw != fsw) continue;
      const int kx = ceil_div(kb_dx, sx), kw = ceil_div(kb_dw, sw);
      if ((sx - 1) * kx >= kb_dx || (sw - 1) * kw >= kb_dw) {  // every split owns k-blocks
        if (force) throw Error("ATTNBWD_SM90_LINEAR_PLAN", "a split without k-blocks for this shape");
        continue;
      }
      const int ux = tiles_dx * sx, uw = tiles_dw * sw;
      for (int gx = csize; gx < cap; gx += csize) {
        if (force && gx != std::min({fcx, ux, cap - csize})) continue;
        const int cx = std::min(gx, ux), cw = std::min(cap - gx, uw);
        const double t =
            std::max(finish(ux, kx, sx, cx, cluster, kFixed, kbt), finish(uw, kw, sw, cw, false, fixed_dw));
        if (force || t < best_t * 0.999) {  // ties: fewer splits (tried first)
          best_t = t;
          best.splits_dx = sx, best.splits_dw = sw, best.ctas_dx = cx;
          best.cluster = lsize;
          best.coop = coop && sx > 1;
          best.grid = coop ? cx + cw : (cx + cw + csize - 1) / csize * csize;  // extra dW CTAs find no units
          best.dx_tile_n = dx_tile_n;
        }
      }
    }
  }
  if (force && best.grid == 0)
    throw Error("ATTNBWD_SM90_LINEAR_PLAN", "fewer than two clusters (or split groups) of this size are resident at once");
  best.model_time = best_t;
  std::size_t bytes = 0;
  if (best.splits_dx > 1) bytes += partial_bytes(dx_tile_n) * tiles_dx * best.splits_dx;
  if (best.splits_dw > 1) bytes += partial_bytes(kBN) * tiles_dw * best.splits_dw;
  best.workspace_bytes = bytes;
  best.counters = static_cast<std::size_t>(tiles_dx + tiles_dw);
  if (forced) return best;  // not cached
  if (cache.size() > 256) cache.clear();  // bounded: shapes vary little in practice
  cache.emplace(key, best);
  return best;
}

LinearBackwardPlan linear_backward_auto_plan(const LinearBackward& p, int sms, int dx_tile_n) {
  if (dx_tile_n == 128) return linear_backward_plan(p, sms, SplitReduce::Cluster, 128);
  LinearBackwardPlan best = linear_backward_plan(p, sms, SplitReduce::Cluster);
  if (best.splits_dx > 1 && cooperative_launch_supported()) {
    const LinearBackwardPlan by_coop = linear_backward_plan(p, sms, SplitReduce::CoResident);
    if (by_coop.coop && by_coop.model_time < 0.9 * best.model_time) best = by_coop;
  }
  if (dx_tile_n == 0 && best.splits_dx > 1 && p.segments == 1) {  // auto: 128-column dX tiles where they model faster
    const LinearBackwardPlan by_n128 = linear_backward_plan(p, sms, SplitReduce::Cluster, 128);
    if (by_n128.model_time < 0.999 * best.model_time) best = by_n128;
  }
  return best;
}

LinearBackwardPlan linear_backward_plan_dx_only(const LinearBackward& p, int sms, int ctas, int max_splits) {
  if (max_splits < 1) fail("linear_backward_plan_dx_only", __FILE__, __LINE__, "max_splits below 1");
  const std::int64_t T = p.tokens(), out = p.out_features, in = p.in_features;
  const int tiles_dx = ceil_div(T, kBM) * ceil_div(in, kBN), kb_dx = ceil_div(out, kBK);
  LinearBackwardPlan best;
  best.dx_only = true;
  double best_t = 1e300;
  for (int sx : {1, 2, 4}) {
    if (sx > max_splits) break;
    const int kx = ceil_div(kb_dx, sx);
    if ((sx - 1) * kx >= kb_dx) continue;
    const int cap = std::min(ctas, resident_ctas(sx, sms)) / sx * sx;
    if (cap < sx) continue;
    const int ux = tiles_dx * sx, cx = std::min(cap, ux);
    const double t = finish(ux, kx, sx, cx, sx > 1);
    if (t < best_t * 0.999) {
      best_t = t;
      best.splits_dx = sx, best.ctas_dx = cx, best.grid = cx, best.cluster = sx;
    }
  }
  best.workspace_bytes = best.splits_dx > 1 ? partial_bytes(kBN) * tiles_dx * best.splits_dx : 0;
  best.counters = static_cast<std::size_t>(tiles_dx);
  return best;
}

double linear_backward_dx_fill(const LinearBackward& p, int sms) {
  const std::int64_t tiles = static_cast<std::int64_t>(ceil_div(p.tokens(), kBM)) * ceil_div(p.in_features, kBN);
  return static_cast<double>(tiles) / static_cast<double>((tiles + sms - 1) / sms * sms);
}

#if ATTNBWD_SM90_LINEAR_TRACE
// The diagnostic build's per-CTA lines (see ATTNBWD_SM90_LINEAR_TRACE): role, start relative to the earliest CTA (ns),
// then code@cycles for each event; the arrays are cleared for the next call.
static void print_trace(const LinearBackwardPlan& plan, std::int64_t T, cudaStream_t stream) {
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  ATTNBWD_CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone) return;
  ATTNBWD_CUDA_CHECK(cudaStreamSynchronize(stream));
  const int n = std::min(plan.grid, kTraceCtas);
  std::vector<unsigned long long> ev(static_cast<std::size_t>(kTraceCtas) * kTraceEvents), st(kTraceCtas);
  std::vector<int> cnt(kTraceCtas);
  ATTNBWD_CUDA_CHECK(cudaMemcpyFromSymbol(ev.data(), g_trace, ev.size() * sizeof(unsigned long long)));
  ATTNBWD_CUDA_CHECK(cudaMemcpyFromSymbol(st.data(), g_trace_start, st.size() * sizeof(unsigned long long)));
  ATTNBWD_CUDA_CHECK(cudaMemcpyFromSymbol(cnt.data(), g_trace_units, cnt.size() * sizeof(int)));
  unsigned long long t0 = ~0ull;
  for (int c = 0; c < n; ++c) t0 = std::min(t0, st[c]);
  std::fprintf(stderr, "linear_backward trace T=%lld grid=%d ctas_dx=%d splits_dx=%d splits_dw=%d\n",
               static_cast<long long>(T), plan.grid, plan.ctas_dx, plan.splits_dx, plan.splits_dw);
  for (int c = 0; c < n; ++c) {
    std::fprintf(stderr, "cta %d %s +%llu ns:", c, c < plan.ctas_dx ? "dx" : "dw", st[c] - t0);
    for (int e = 0; e < cnt[c] && e < kTraceEvents; ++e) {
      const unsigned long long x = ev[static_cast<std::size_t>(c) * kTraceEvents + e];
      std::fprintf(stderr, " %llu@%llu", x >> 56, x & ((1ull << 56) - 1));
    }
    std::fprintf(stderr, "\n");
  }
  std::fill(cnt.begin(), cnt.end(), 0);
  ATTNBWD_CUDA_CHECK(cudaMemcpyToSymbol(g_trace_units, cnt.data(), cnt.size() * sizeof(int)));
}
#endif

void linear_backward_launch(const LinearBackward& p, const LinearBackwardPlan& plan, void* workspace,
                            unsigned* counters, cudaStream_t stream, bool after_own_kernel) {
  const std::int64_t T = p.tokens(), out = p.out_features, in = p.in_features;
  const std::int64_t S = p.seq_len, H = p.heads, D = p.head_dim;

  GemmDesc dx{};
  dx.M = static_cast<int>(T), dx.N = static_cast<int>(in), dx.kb_total = ceil_div(out, kBK);
  if (plan.dx_tile_n != 256 && (plan.dx_tile_n != 128 || plan.splits_dx > 2 || p.segments > 1 ||
                                (plan.splits_dx > 1 && plan.cluster == 1 && !plan.coop) || plan.dx_only))
    fail("linear_backward_launch", __FILE__, __LINE__, "a plan with 128-column dX tiles the kernel cannot run");
  dx.tiles_n = ceil_div(in, plan.dx_tile_n), dx.splits = plan.splits_dx;
  dx.kb_per_split = ceil_div(dx.kb_total, dx.splits);
  dx.units = ceil_div(T, kBM) * dx.tiles_n * dx.splits;
  dx.a_kmajor = 1;
  dx.out = static_cast<__nv_bfloat16*>(p.grad_input);
  dx.rows_per_b = static_cast<int>(S), dx.cols_per_h = static_cast<int>(D);
  dx.stride_b = H * S * D, dx.stride_r = D, dx.stride_h = S * D;
  dx.vec16 = D % 8 == 0 && aligned16(p.grad_input);
  // A 64-row block of tokens stays in one batch element (or there is one: TMA clips the rows past S) and a
  // 64-column block in one head.
  dx.tma_store = D % 64 == 0 && (S % 64 == 0 || p.batch == 1) && aligned16(p.grad_input);
  dx.heads = static_cast<int>(H);

  GemmDesc dw{};
  dw.M = static_cast<int>(out), dw.N = static_cast<int>(in), dw.kb_total = ceil_div(T, kBK);
  dw.tiles_n = ceil_div(in, kBN), dw.splits = plan.splits_dw;
  dw.kb_per_split = ceil_div(dw.kb_total, dw.splits);
  dw.units = plan.dx_only ? 0 : ceil_div(out, kBM) * dw.tiles_n * dw.splits;
  dw.a_kmajor = 0;
  const bool grouped = p.segments > 1;
  dw.out = static_cast<__nv_bfloat16*>(grouped ? p.seg_grad_weight[0] : p.grad_weight);
  dw.rows_per_b = static_cast<int>(out), dw.cols_per_h = static_cast<int>(in);
  dw.stride_b = 0, dw.stride_r = in, dw.stride_h = 0;
  // in % 8 == 0 (linear_backward_unsupported); grouped: every segment aligned (TMA stores, by segment)
  dw.vec16 = aligned16(dw.out);
  dw.tma_store = dw.vec16;
  dw.heads = 1;

  auto* ws = static_cast<std::uint8_t*>(workspace);
  std::size_t off = 0;
  if (dx.splits > 1) dx.partial = reinterpret_cast<float*>(ws + off), off += partial_bytes(plan.dx_tile_n) * dx.units;
  if (dw.splits > 1) dw.partial = reinterpret_cast<float*>(ws + off), off += partial_bytes(kBN) * dw.units;
  dx.counters = counters;
  dw.counters = counters + dx.units / dx.splits;
  dx.cluster_reduce = (plan.cluster > 1 || plan.coop) && dx.splits > 1;

  const CUtensorMap a_dx = tensor_map(p.grad_output, T, out, p.ld_dy(), 64, kBM);  // dY, K-major boxes
  const CUtensorMap a_dw = tensor_map(p.grad_output, T, out, p.ld_dy(), 64, 64);   // dY as [k=t][m=o]
  const CUtensorMap b_dw = tensor_map(p.input, T, in, p.ld_x(), 64, 64);           // X [k=t][n=i]
  // W [k=out][n=in] and dW [out][in], per segment when grouped (unused maps stay zero: never read).
  CUtensorMap b_dx[LinearBackward::kMaxSegments]{}, out_dw[LinearBackward::kMaxSegments]{}, out_dx{};
  Params prm{};
  int seg1 = INT_MAX, seg2 = INT_MAX;
  if (grouped) {
    std::int64_t row = 0;
    for (int i = 0; i < p.segments; ++i) {
      if (i == 1) seg1 = static_cast<int>(row);
      if (i == 2) seg2 = static_cast<int>(row);
      b_dx[i] = tensor_map(p.seg_weight[i], p.seg_rows[i], in, in, 64, 64);
      out_dw[i] = store_map(p.seg_grad_weight[i], in, p.seg_rows[i], 1);
      row += p.seg_rows[i];
    }
  } else {
    b_dx[0] = tensor_map(p.weight, out, in, in, 64, 64);
    if (dw.tma_store) out_dw[0] = store_map(p.grad_weight, in, out, 1);
  }
  if (dx.tma_store) out_dx = store_map(p.grad_input, D, S, p.batch * H);
  prm.dx = dx, prm.dw = dw, prm.ctas_dx = plan.ctas_dx;
  prm.dx_n128 = plan.dx_tile_n == 128;

  allow_max_smem();
  if (plan.cluster > 1 && (plan.ctas_dx % plan.cluster || plan.grid % plan.cluster))
    fail("linear_backward_launch", __FILE__, __LINE__, "plan with CTAs not in whole clusters");
  // A cooperative plan: a tile's splits are consecutive CTAs in the same round of every dX CTA (ctas_dx a multiple
  // of the splits), and the whole grid resident at once (one CTA per SM).
  if (plan.coop) {
    const DeviceLimits d = device_limits();
    if (!d.cooperative || plan.cluster != 1 || plan.splits_dx < 2 || plan.ctas_dx % plan.splits_dx || plan.grid > d.sms)
      fail("linear_backward_launch", __FILE__, __LINE__, "a cooperative plan the device cannot hold at once");
  }
  cudaLaunchAttribute attr[2];
  // The CTAs of a split dX tile in one cluster (co-scheduled); clusters of 1 otherwise (cooperative where the
  // plan says so).
  cudaLaunchConfig_t cfg = cluster_config(plan.cluster, plan.grid, stream, attr[0]);
  if (plan.coop) {
    attr[0] = cudaLaunchAttribute{};
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
  }
  const bool pdl = after_own_kernel && !plan.coop;  // (cooperative grids: a plain launch)
  if (pdl) {  // a programmatic dependent of the kernel before it (the caller's contract in the header)
    attr[1] = programmatic_dependent_attribute();
    cfg.attrs = attr, cfg.numAttrs = 2;
  }
  if (grouped)
    ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_backward_grouped_kernel, a_dx, b_dx[0], a_dw, b_dw, out_dx,
                                          out_dw[0], b_dx[1], b_dx[2], out_dw[1], out_dw[2], prm, seg1, seg2));
  else if (plan.cluster > 1 || plan.coop || pdl)
    ATTNBWD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, linear_backward_kernel, a_dx, b_dx[0], a_dw, b_dw, out_dx, out_dw[0], prm));
  else
    linear_backward_kernel<<<plan.grid, kThreads, kSmemBytes, stream>>>(a_dx, b_dx[0], a_dw, b_dw, out_dx, out_dw[0], prm);
  ATTNBWD_CUDA_CHECK_LAUNCH();
#if ATTNBWD_SM90_LINEAR_TRACE
  print_trace(plan, T, stream);
#endif
}

void allow_smem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::vector<std::pair<int, const void*>> ready;
  int dev = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  if (std::find(ready.begin(), ready.end(), std::make_pair(dev, kernel)) != ready.end()) return;
  ATTNBWD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  ready.emplace_back(dev, kernel);
}

cudaLaunchConfig_t cluster_launch_config(int size, int grid, int threads, std::size_t smem, cudaStream_t stream,
                                         cudaLaunchAttribute& attr) {
  attr = cudaLaunchAttribute{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = static_cast<unsigned>(size), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid)), cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  return cfg;
}

}  // namespace attnbwd::cuda::sm90
