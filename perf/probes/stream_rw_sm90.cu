// Probe (not part of the library, not built by CMake): the DRAM ceiling of the traffic pattern of gqa's q/k/v
// projection pair at small T (the thin-T and grouped kernels of backends/cuda/linear_*_sm90.cu), without their
// products. A bf16 matrix W [6144][5120] (63 MB) is read in TMA tiles of 64 rows × 128 columns (16 KB) and a
// matrix dW of the same shape is written in tiles of the same shape, as those kernels stream W in and dW out.
// Modes (each timed alone, L2 flushed before every run by a 256 MB memset, CUDA events, median of 9):
//   copy   each CTA loads its tiles through an S-slot ring and TMA-stores each tile into dW (63 MB read +
//          63 MB written: the pair's minimum traffic);
//   copy+a the same, plus per k-block a 64 × 192 tile of a small dY [192][6144] (24 KB, from L2 after its
//          first read: thin's A operand);
//   read   loads only;  write  stores only (from a resident tile);
//   split  half the CTAs read, half write (the two-stream cuBLASLt pattern);
//   plain  a grid-stride int4 copy (the generic-proxy reference).
// Work split: "slice" = CTA c takes column slice c / R and a contiguous range of k-blocks (thin's plan);
// "interleaved" = tile t = kb·40 + slice goes to CTA t mod G (a persistent order).
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o probe perf/probes/stream_rw_sm90.cu -lcuda && ./probe
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.cuh"

namespace {

constexpr int kRows = 6144, kCols = 5120, kT = 192, kTile = 64 * 128 * 2, kATile = 64 * kT * 2;
constexpr int kSlices = kCols / 128, kKb = kRows / 64;

__device__ __forceinline__ void bar_init(std::uint64_t* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_expect(std::uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void load2d(void* dst, const CUtensorMap* m, std::uint64_t* b, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          sa(dst)),
      "l"(reinterpret_cast<std::uint64_t>(m)), "r"(sa(b)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void store2d(const CUtensorMap* m, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                   reinterpret_cast<std::uint64_t>(m)),
               "r"(sa(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wait_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

enum Mode { kCopy = 0, kCopyA = 1, kRead = 2, kWrite = 3, kSplit = 4 };

struct Args {
  int mode, order, grid;
};

// The tile (kb, slice) of CTA c's i-th step; n = its step count.
__device__ __forceinline__ void tile_of(const Args& a, int c, int i, int& kb, int& slice) {
  if (a.order == 0) {  // slice plan: R = grid / 40 ranges per slice
    const int R = a.grid / kSlices, per = (kKb + R - 1) / R;
    slice = c / R, kb = (c % R) * per + i;
  } else {
    const int t = c + i * a.grid;
    kb = t / kSlices, slice = t % kSlices;
  }
}
__device__ __forceinline__ int steps_of(const Args& a, int c) {
  if (a.order == 0) {
    const int R = a.grid / kSlices, per = (kKb + R - 1) / R;
    if (c >= R * kSlices) return 0;
    return max(0, min(per, kKb - (c % R) * per));
  }
  const int total = kKb * kSlices;
  return c < total ? (total - c + a.grid - 1) / a.grid : 0;
}

template <int S>
__global__ void __launch_bounds__(32) stream_kernel(const __grid_constant__ CUtensorMap w,
                                                    const __grid_constant__ CUtensorMap dw,
                                                    const __grid_constant__ CUtensorMap dy, Args a) {
  extern __shared__ __align__(1024) std::uint8_t smem[];
  std::uint8_t* base = smem + ((1024 - (sa(smem) & 1023)) & 1023);
  const bool with_a = a.mode == kCopyA;
  const int slot_bytes = kTile + (with_a ? kATile : 0);
  std::uint64_t* full = reinterpret_cast<std::uint64_t*>(base + S * slot_bytes);
  const int c = blockIdx.x, n = steps_of(a, c);
  if (threadIdx.x != 0) return;
  for (int s = 0; s < S; ++s) bar_init(&full[s], 1);
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  int mode = a.mode;
  if (mode == kSplit) mode = (c % 2) ? kWrite : kRead;
  auto issue = [&](int i) {
    int kb, slice;
    tile_of(a, c, i, kb, slice);
    std::uint8_t* slot = base + (i % S) * slot_bytes;
    bar_expect(&full[i % S], slot_bytes);
    load2d(slot, &w, &full[i % S], slice * 128, kb * 64);
    if (with_a) load2d(slot + kTile, &dy, &full[i % S], kb * 64, 0);
  };
  if (mode == kWrite) {
    for (int i = 0; i < n; ++i) {
      int kb, slice;
      tile_of(a, c, i, kb, slice);
      store2d(&dw, base + (i % S) * slot_bytes, slice * 128, kb * 64);
      commit();
      wait_read<S - 1>();
    }
    wait_all();
    return;
  }
  for (int i = 0; i < min(S, n); ++i) issue(i);
  for (int i = 0; i < n; ++i) {
    bar_wait(&full[i % S], (i / S) & 1);
    if (mode == kRead) {
      if (i + S < n) issue(i + S);
      continue;
    }
    int kb, slice;
    tile_of(a, c, i, kb, slice);
    store2d(&dw, base + (i % S) * slot_bytes, slice * 128, kb * 64);
    commit();
    if (i >= 1) {  // the store of step i − 1 has read its slot: refill it
      wait_read<1>();
      if (i - 1 + S < n) issue(i - 1 + S);
    }
  }
  wait_all();
}

__global__ void plain_copy(const int4* __restrict__ src, int4* __restrict__ dst, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

CUtensorMap map2d(void* p, std::uint64_t rows, std::uint64_t cols, int box_c, int box_r) {
  CUtensorMap m;
  cuuint64_t dims[2] = {cols, rows}, strides[1] = {cols * 2};
  cuuint32_t box[2] = {static_cast<cuuint32_t>(box_c), static_cast<cuuint32_t>(box_r)}, es[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p, dims, strides, box, es,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed %d\n", static_cast<int>(r));
    std::exit(1);
  }
  return m;
}

void* g_flush;
constexpr std::size_t kFlush = 256u << 20;

template <class F>
float time_cold(F&& f) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  f();
  CK(cudaDeviceSynchronize());
  std::vector<float> ts;
  for (int i = 0; i < 9; ++i) {
    CK(cudaMemsetAsync(g_flush, i, kFlush));
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1e3f);
  }
  CK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

template <int S>
float run(const CUtensorMap& w, const CUtensorMap& dw, const CUtensorMap& dy, Args a) {
  const int slot = kTile + (a.mode == kCopyA ? kATile : 0), smem = S * slot + S * 8 + 1024;
  if (smem > 227 * 1024) return -1;
  CK(cudaFuncSetAttribute(stream_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  return time_cold([&] { stream_kernel<S><<<a.grid, 32, smem>>>(w, dw, dy, a); });
}

}  // namespace

int main() {
  const std::size_t bytes = static_cast<std::size_t>(kRows) * kCols * 2;
  void *W, *dW, *dY;
  CK(cudaMalloc(&W, bytes));
  CK(cudaMalloc(&dW, bytes));
  CK(cudaMalloc(&dY, static_cast<std::size_t>(kT) * kRows * 2));
  CK(cudaMalloc(&g_flush, kFlush));
  CK(cudaMemset(W, 1, bytes));
  CK(cudaMemset(dY, 1, static_cast<std::size_t>(kT) * kRows * 2));
  const CUtensorMap w = map2d(W, kRows, kCols, 128, 64), dw = map2d(dW, kRows, kCols, 128, 64),
                    dy = map2d(dY, kT, kRows, 64, kT);
  const char* names[] = {"copy", "copy+a", "read", "write", "split"};
  std::printf("{\"probe\":\"stream_rw_sm90\",\"W_MB\":%.1f,\"rows\":[\n", bytes / 1e6);
  bool first = true;
  auto emit = [&](const char* mode, const char* order, int grid, int S, float us, double moved) {
    if (us < 0) return;
    std::printf("%s{\"mode\":\"%s\",\"order\":\"%s\",\"grid\":%d,\"stages\":%d,\"us\":%.2f,\"TBps\":%.3f}\n",
                first ? "" : ",", mode, order, grid, S, us, moved / us / 1e6);
    first = false;
  };
  for (int mode = 0; mode < 5; ++mode)
    for (int order = 0; order < 2; ++order)
      for (int grid : {120, 132, 264}) {
        if (order == 0 && grid % kSlices) continue;
        const Args a{mode, order, grid};
        const double moved = (mode == kRead || mode == kWrite) ? bytes : (mode == kSplit ? bytes : 2.0 * bytes);
        const char* on = order ? "interleaved" : "slice";
        emit(names[mode], on, grid, 2, run<2>(w, dw, dy, a), moved);
        emit(names[mode], on, grid, 4, run<4>(w, dw, dy, a), moved);
        if (grid <= 132) {
          emit(names[mode], on, grid, 8, run<8>(w, dw, dy, a), moved);
          emit(names[mode], on, grid, 12, run<12>(w, dw, dy, a), moved);
        }
      }
  for (int grid : {132, 264, 528, 1056}) {
    const std::size_t n = bytes / 16;
    const float us = time_cold([&] {
      plain_copy<<<grid, 512>>>(static_cast<const int4*>(W), static_cast<int4*>(dW), n);
    });
    emit("plain", "grid-stride", grid, 0, us, 2.0 * bytes);
  }
  std::printf("]}\n");
  return 0;
}
