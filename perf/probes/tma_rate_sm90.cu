// Probe (not part of the library, not built by CMake): how many bytes per cycle one SM's TMA loads bring from L2 into
// shared memory, by box shape and instruction count. The thirty-first session's in-kernel L2 prefetches (extra TMA
// instructions of the same boxes) slowed linear_backward_sm90 by up to 1.7×, which suggests that the TMA side of an
// SM, not DRAM or L2, is near its limit in that kernel (48 KB per 1,024-cycle k-block at 256-column tiles, 32 KB per
// 512 cycles at 128 columns).
// One CTA per SM (grid = SM count), one thread issuing loads into a ring of `slots` stages and waiting for each stage
// before reissuing it (no compute). W is a bf16 [2048][4096] matrix (16 MB, L2-resident: the timed runs follow a
// warm-up, no flush). Each stage is `per` boxes of one shape; the CTA walks k-blocks of its own column tile so that
// every box is an L2 hit. Reported: bytes per SM per SM-cycle (clock64 around the loop, median over CTAs), and the
// aggregate GB/s. Shapes: 2-D boxes of 64 columns (128 B, 128-byte swizzle) × 64 or 128 rows, and a 3-D view
// [n_chunk][k][64] whose one box {64, 64, 4} covers what four 64 × 64 boxes do (strides: k = 4096·2 bytes, chunk =
// 128 bytes, not increasing: whether the driver takes such a map is part of the question).
// Then (tma_mc_kernel) the same with multicast in clusters of 2.
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o probe perf/probes/tma_rate_sm90.cu -lcuda && ./probe
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"

namespace {

constexpr int kRows = 2048, kCols = 4096;


// Runs the ring: `slots` stages issued, then each waited for, `after(s)` (its release), and reissued `slots` later;
// returns the SM cycles the loop took.
template <class Issue, class After>
__device__ __forceinline__ unsigned long long run_ring(Issue&& issue, After&& after, std::uint64_t* full, int slots,
                                                       int steps) {
  const unsigned long long t0 = clock64();
  for (int i = 0; i < slots && i < steps; ++i) issue(i);
  for (int i = 0; i < steps; ++i) {
    const int s = i % slots;
    bar_wait(&full[s], (i / slots) & 1);
    after(s);
    if (i + slots < steps) issue(i + slots);
  }
  return clock64() - t0;
}

struct Shape {
  const char* name;
  int dims;       // 2 or 3
  int box_rows;   // rows (k) per box
  int per;        // boxes per stage
  int chunks;     // 3-D: 64-column chunks per box
};

__global__ void __launch_bounds__(32) tma_kernel(const __grid_constant__ CUtensorMap m, Shape sh, int slots, int steps,
                                                 unsigned long long* cycles) {
  extern __shared__ __align__(1024) std::uint8_t smem[];
  std::uint8_t* base = smem + ((1024 - (sa(smem) & 1023)) & 1023);
  const int box_bytes = sh.dims == 3 ? 64 * 2 * 64 * sh.chunks : 64 * 2 * sh.box_rows;
  const int stage_bytes = box_bytes * sh.per;
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(base + slots * stage_bytes);
  if (threadIdx.x != 0) return;
  for (int s = 0; s < slots; ++s)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&full[s])) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  const int tiles = sh.dims == 3 ? kCols / (64 * sh.chunks) : kCols / (64 * sh.per);
  const int tn = static_cast<int>(blockIdx.x) % tiles;
  const int kb_rows = sh.dims == 3 ? 64 : sh.box_rows;
  const int kbs = kRows / kb_rows;
  auto issue = [&](int i) {
    const int s = i % slots, kb = (i + static_cast<int>(blockIdx.x)) % kbs;
    std::uint8_t* dst = base + s * stage_bytes;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&full[s])), "r"(stage_bytes)
                 : "memory");
    if (sh.dims == 3) {
      asm volatile(
          "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];" ::
              "r"(sa(dst)),
          "l"(reinterpret_cast<std::uint64_t>(&m)), "r"(sa(&full[s])), "r"(0), "r"(kb * 64), "r"(tn * sh.chunks)
          : "memory");
    } else {
      for (int c = 0; c < sh.per; ++c)
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
                "r"(sa(dst + c * box_bytes)),
            "l"(reinterpret_cast<std::uint64_t>(&m)), "r"(sa(&full[s])), "r"((tn * sh.per + c) * 64),
            "r"(kb * kb_rows)
            : "memory");
    }
  };
  cycles[blockIdx.x] = run_ring(issue, [](int) {}, full, slots, steps);
}

// The same stream in clusters of 2: each CTA issues half of every stage's boxes (per / 2 of them) with .multicast::cluster
// into both CTAs' shared memory, so each SM receives the whole stage while its TMA issues half of it (a tile's W shared
// by the CTAs of two M blocks). A stage is reissued once both CTAs have seen it complete (an empty barrier of count 2:
// the own arrival and the peer's, remote).
__global__ void __launch_bounds__(32) tma_mc_kernel(const __grid_constant__ CUtensorMap m, Shape sh, int slots,
                                                    int steps, unsigned long long* cycles) {
  extern __shared__ __align__(1024) std::uint8_t smem[];
  std::uint8_t* base = smem + ((1024 - (sa(smem) & 1023)) & 1023);
  const int box_bytes = 64 * 2 * sh.box_rows;
  const int stage_bytes = box_bytes * sh.per;
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(base + slots * stage_bytes);
  std::uint64_t* empty = full + slots;
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&full[s])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 2;" ::"r"(sa(&empty[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
  if (threadIdx.x != 0) return;
  const int tiles = kCols / (64 * sh.per);
  const int tn = static_cast<int>(blockIdx.x / 2) % tiles;
  const int kbs = kRows / sh.box_rows;
  const int half = sh.per / 2;
  auto issue = [&](int i) {
    const int s = i % slots, kb = (i + static_cast<int>(blockIdx.x / 2)) % kbs;
    std::uint8_t* dst = base + s * stage_bytes;
    if (i >= slots) {  // both CTAs have seen this slot's previous fill complete
      bar_wait(&empty[s], ((i / slots) - 1) & 1);
    }
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&full[s])), "r"(stage_bytes)
                 : "memory");
    const unsigned short mask = 3;
    for (int c = static_cast<int>(rank) * half; c < (static_cast<int>(rank) + 1) * half; ++c)
      asm volatile(
          "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
          "%4}], [%2], %5;" ::"r"(sa(dst + c * box_bytes)),
          "l"(reinterpret_cast<std::uint64_t>(&m)), "r"(sa(&full[s])), "r"((tn * sh.per + c) * 64),
          "r"(kb * sh.box_rows), "h"(mask)
          : "memory");
  };
  // each stage released in both CTAs: the own empty barrier and the peer's (its multicast writes here too)
  const auto release = [&](int s) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(&empty[s])) : "memory");
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(sa(&empty[s])), "r"(rank ^ 1u));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
  };
  cycles[blockIdx.x] = run_ring(issue, release, full, slots, steps);
  // neither CTA may exit while the peer can still arrive on its barriers or multicast into it
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

bool make_map(CUtensorMap* m, void* p, const Shape& sh) {
  CUresult r;
  cuuint32_t es[3] = {1, 1, 1};
  if (sh.dims == 3) {
    cuuint64_t dims[3] = {64, kRows, kCols / 64}, strides[2] = {kCols * 2, 128};
    cuuint32_t box[3] = {64, 64, static_cast<cuuint32_t>(sh.chunks)};
    r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p, dims, strides, box, es,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    cuuint64_t dims[2] = {kCols, kRows}, strides[1] = {kCols * 2};
    cuuint32_t box[2] = {64, static_cast<cuuint32_t>(sh.box_rows)};
    r = cuTensorMapEncodeTiled(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims, strides, box, es,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  if (r != CUDA_SUCCESS) std::printf("%-28s cuTensorMapEncodeTiled refused it (%d)\n", sh.name, static_cast<int>(r));
  return r == CUDA_SUCCESS;
}

// One warm-up launch, then one timed by events: its milliseconds and the median CTA's cycles (cyc[0, grid)).
struct Timed {
  float ms;
  double cycles;
};
template <class Launch>
Timed timed(Launch&& launch, const unsigned long long* cyc, int grid) {
  launch();
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  launch();
  CK(cudaEventRecord(e1));
  CK(cudaEventSynchronize(e1));
  CK(cudaGetLastError());
  Timed t{};
  CK(cudaEventElapsedTime(&t.ms, e0, e1));
  std::vector<unsigned long long> c(grid);
  CK(cudaMemcpy(c.data(), cyc, grid * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  std::sort(c.begin(), c.end());
  t.cycles = static_cast<double>(c[grid / 2]);
  return t;
}

}  // namespace

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  void* w = nullptr;
  CK(cudaMalloc(&w, static_cast<std::size_t>(kRows) * kCols * 2));
  CK(cudaMemset(w, 1, static_cast<std::size_t>(kRows) * kCols * 2));
  unsigned long long* cyc = nullptr;
  CK(cudaMalloc(&cyc, sms * sizeof(unsigned long long)));
  CK(cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  const Shape shapes[] = {
      {"2d 64x64 boxes, 1 per stage", 2, 64, 1, 0},   {"2d 64x64 boxes, 2 per stage", 2, 64, 2, 0},
      {"2d 64x64 boxes, 4 per stage", 2, 64, 4, 0},   {"2d 64x128 boxes, 1 per stage", 2, 128, 1, 0},
      {"2d 64x128 boxes, 2 per stage", 2, 128, 2, 0}, {"2d 64x256 boxes, 1 per stage", 2, 256, 1, 0},
      {"3d {64,64,2} box, 1 per stage", 3, 64, 1, 2}, {"3d {64,64,4} box, 1 per stage", 3, 64, 1, 4},
  };
  // Multicast in clusters of 2: 2 or 4 boxes of 64 × 64 per stage, half issued by each CTA.
  CK(cudaFuncSetAttribute(tma_mc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  for (const Shape sh : {Shape{"mc2 2d 64x64, 2 per stage", 2, 64, 2, 0}, Shape{"mc2 2d 64x64, 4 per stage", 2, 64, 4, 0},
                         Shape{"mc2 2d 64x128, 2 per stage", 2, 128, 2, 0}}) {
    CUtensorMap m;
    if (!make_map(&m, w, sh)) continue;
    const int stage = 64 * 2 * sh.box_rows * sh.per;
    for (int slots : {4, 6}) {
      if (slots * stage + 1024 + 128 > 227 * 1024) continue;
      const int steps = 4096, grid = sms / 2 * 2;
      const std::size_t smem = static_cast<std::size_t>(slots) * stage + 1024 + 128;
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 2, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(grid), cfg.blockDim = dim3(32), cfg.dynamicSmemBytes = smem, cfg.attrs = &attr, cfg.numAttrs = 1;
      const Timed t = timed([&] { CK(cudaLaunchKernelEx(&cfg, tma_mc_kernel, m, sh, slots, steps, cyc)); }, cyc, grid);
      const double bytes = static_cast<double>(stage) * steps;  // received per SM
      std::printf("%-30s slots %d stage %6d B: %6.1f B/cycle per SM received (median CTA), %7.0f GB/s received\n",
                  sh.name, slots, stage, bytes / t.cycles, bytes * grid / (t.ms * 1e-3) * 1e-9);
      std::fflush(stdout);
    }
  }
  for (const Shape& sh : shapes) {
    CUtensorMap m;
    if (!make_map(&m, w, sh)) continue;
    const int box_bytes = sh.dims == 3 ? 64 * 2 * 64 * sh.chunks : 64 * 2 * sh.box_rows;
    const int stage = box_bytes * sh.per;
    for (int slots : {2, 4, 6}) {
      if (slots * stage + 1024 + 64 > 227 * 1024) continue;
      const int steps = 4096;
      const std::size_t smem = static_cast<std::size_t>(slots) * stage + 1024 + 64;
      const Timed t = timed([&] { tma_kernel<<<sms, 32, smem>>>(m, sh, slots, steps, cyc); }, cyc, sms);
      const double bytes = static_cast<double>(stage) * steps;
      std::printf("%-30s slots %d stage %6d B: %6.1f B/cycle per SM (median CTA), %7.0f GB/s aggregate, %6.1f cycles "
                  "per TMA instruction\n",
                  sh.name, slots, stage, bytes / t.cycles, bytes * sms / (t.ms * 1e-3) * 1e-9,
                  t.cycles / steps / (sh.dims == 3 ? 1 : sh.per));
      std::fflush(stdout);
    }
  }
  return 0;
}
