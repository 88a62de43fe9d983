// Probe (not part of the library, not built by CMake): does compute-sanitizer racecheck model the mbarrier that
// orders a shared-memory stage ring filled by cp.async.bulk (the non-tensor bulk copy)? mha's dK/dV kernels load each
// stage's δ (64 floats) that way, and racecheck reports "Write access at bulk_load ... and Read access at
// ds_transposed" there (fifty-sixth session, mha #10 and #4), while the same ring's P tiles, filled by
// cp.async.bulk.tensor and read by ld.shared after the same barrier, are not reported.
//
// One ring, three ways to fill it, the same order: a producer thread waits on a stage's empty barrier (one arrival
// per consumer warp, after the warp's reads), arms the full barrier and fills the stage; each consumer warp waits on
// the full barrier, reads the stage with ld.shared, then releases it. Modes:
//   bulk     cp.async.bulk.shared::cluster.global, completing on the full barrier (complete_tx) — mha's δ;
//   tensor   cp.async.bulk.tensor.1d through a tensor map, completing on the full barrier — mha's P tiles;
//   generic  the producer thread copies with ld.global / st.shared and arrives on the full barrier (no async proxy).
// Every mode is race-free by the PTX memory model (the empty barrier's arrive/wait orders each read before the next
// write of its stage; the full barrier's complete_tx or arrive each write before the reads). The kernel checks its
// sums against the host's, so a wrong order would also show as a mismatch. A report under racecheck in one mode and
// none in another is the tool's model, not the ring.
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o rb perf/probes/racecheck_bulk_mbarrier.cu -lcuda
//   for m in bulk tensor generic; do compute-sanitizer --tool racecheck ./rb $m; done
#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "probe_check.cuh"

namespace {

constexpr int kStages = 2, kBlocks = 16, kFloats = 64, kConsumerWarps = 4, kCtas = 8;
constexpr int kThreads = 32 * (1 + kConsumerWarps);

__device__ __forceinline__ void bar_init(std::uint64_t* b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_arrive(std::uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory");
}
__device__ __forceinline__ void bar_expect(std::uint64_t* b, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}

enum Mode { kBulk = 0, kTensor = 1, kGeneric = 2 };

__global__ void __launch_bounds__(kThreads) ring(const __grid_constant__ CUtensorMap map, const float* src,
                                                 float* out, int mode) {
  __shared__ alignas(128) float stage[kStages][kFloats];
  __shared__ alignas(8) std::uint64_t full[kStages], empty[kStages];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const float* mine = src + static_cast<std::size_t>(blockIdx.x) * kBlocks * kFloats;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) bar_init(&full[s], 1), bar_init(&empty[s], kConsumerWarps);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {  // producer
    if (lane != 0) return;
    for (int i = 0; i < kBlocks; ++i) {
      const int s = i % kStages;
      bar_wait(&empty[s], ((i / kStages) & 1) ^ 1);
      if (mode == kGeneric) {
        for (int f = 0; f < kFloats; ++f) stage[s][f] = mine[i * kFloats + f];
        bar_arrive(&full[s]);
      } else {
        bar_expect(&full[s], kFloats * 4);
        if (mode == kBulk)
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                           sa(stage[s])),
                       "l"(mine + i * kFloats), "r"(kFloats * 4), "r"(sa(&full[s]))
                       : "memory");
        else
          asm volatile(
              "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];" ::
                  "r"(sa(stage[s])),
              "l"(reinterpret_cast<std::uint64_t>(&map)), "r"(sa(&full[s])),
              "r"(static_cast<int>((blockIdx.x * kBlocks + i) * kFloats))
              : "memory");
      }
    }
    return;
  }
  float acc = 0.f;  // consumer warp w - 1: lanes read floats lane and lane + 32 of every block
  for (int i = 0; i < kBlocks; ++i) {
    const int s = i % kStages;
    bar_wait(&full[s], (i / kStages) & 1);
    acc += stage[s][lane] * static_cast<float>(i + 1) + stage[s][lane + 32];
    __syncwarp();
    if (lane == 0) bar_arrive(&empty[s]);
  }
  out[(static_cast<std::size_t>(blockIdx.x) * kConsumerWarps + (warp - 1)) * 32 + lane] = acc;
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"bulk", "tensor", "generic"};
  int mode = -1;
  for (int m = 0; m < 3; ++m)
    if (argc > 1 && std::strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    std::fprintf(stderr, "usage: %s bulk|tensor|generic\n", argv[0]);
    return 2;
  }
  const std::size_t n = static_cast<std::size_t>(kCtas) * kBlocks * kFloats, nout = kCtas * kConsumerWarps * 32;
  std::vector<float> h(n), got(nout);
  for (std::size_t i = 0; i < n; ++i) h[i] = static_cast<float>((i * 2654435761u) % 1000) / 64.f;
  float *src = nullptr, *out = nullptr;
  CK(cudaMalloc(&src, n * 4));
  CK(cudaMalloc(&out, nout * 4));
  CK(cudaMemcpy(src, h.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(out, 0xff, nout * 4));
  CUtensorMap map;
  std::memset(&map, 0, sizeof map);
  const cuuint64_t dims[1] = {n};
  const cuuint32_t box[1] = {kFloats}, estr[1] = {1};
  if (cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 1, src, dims, nullptr, box, estr,
                             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                             CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    return 1;
  }
  ring<<<kCtas, kThreads>>>(map, src, out, mode);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(got.data(), out, nout * 4, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int c = 0; c < kCtas; ++c)
    for (int w = 0; w < kConsumerWarps; ++w)
      for (int l = 0; l < 32; ++l) {
        float want = 0.f;
        for (int i = 0; i < kBlocks; ++i) {
          const float* b = h.data() + (static_cast<std::size_t>(c) * kBlocks + i) * kFloats;
          want += b[l] * static_cast<float>(i + 1) + b[l + 32];
        }
        bad += got[(static_cast<std::size_t>(c) * kConsumerWarps + w) * 32 + l] != want;
      }
  std::printf("mode %s: %d of %zu sums differ from the host's\n", names[mode], bad, nout);
  CK(cudaFree(src));
  CK(cudaFree(out));
  return bad != 0;
}
