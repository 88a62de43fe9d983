// Probe (not part of the library, not built by CMake): what a per-block exchange of partial row sums across a
// cluster of a head's CTAs costs in an L2-bound streaming kernel of mha's shape. For the key-split lead of
// perf/NOTES.md (fifty-fourth and fifty-fifth sessions): one cluster of n = ⌈S/128⌉ CTAs per head, each CTA owning
// 128 keys and streaming every 64-row query block once, reads P once instead of twice, but δ (a row sum over all
// keys) is then known only after each block's partial sums from every CTA of the cluster are in. The multicast tried
// in the fifty-fourth session coupled a cluster's CTAs at every stage and cost +30-62 %; this coupling is looser
// (each CTA keeps its own stage stream; only 64 floats per block cross the cluster) and may lag by L blocks.
//
// Each CTA (256 threads, one per SM by its shared memory) streams nq = ⌈S/64⌉ blocks of its head: per block its
// 64 × 128 fp32 slice of P (32 KB, rows of ld floats, each CTA's own) and a 64 × 64 fp32 tile shared by the head's
// CTAs (16 KB, L2 hits after the first: the fp16 Q/dO tiles' share of the real stage), `work` dependent FMAs per
// thread (the consumers' math), the partial row sums of its slice (a quad shuffle). Modes:
//   local   no exchange, clusters of 1 (today's placement);
//   local5  no exchange, clusters of n (the placement cost alone: clusters of 5 hold 110 of 132 SMs on an H100);
//   xL      clusters of n, the 64 partial sums sent to every partner's ring slot (st.shared::cluster, then one
//           remote mbarrier arrive per partner, release.cluster) and the block L before waited for (acquire.cluster)
//           and summed in rank order (L = 0, 1, 2, 3: x0 is full lockstep).
// Every mode writes each block's δ = Σ of the n partial sums (x modes: rank 0 after the exchange; local modes: every
// CTA writes its partial sums and the host adds them in rank order), and the host checks that the x modes' δ equal
// the local mode's bit for bit. Reported: the median of 10 timed launches (CUDA events) and the time per CTA block
// step; with `work` 0 and one more value chosen so that `local` takes about the real kernels' ~1.8 µs per step.
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o probe perf/probes/cluster_delta_exchange.cu && ./probe [heads] [work...]
// (heads: 368 = B·H of mha #8; S = 577.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_check.cuh"

namespace {

constexpr int kS = 577, kKeys = 128, kRowsBlk = 64, kThreads = 256;
constexpr int kN = (kS + kKeys - 1) / kKeys;          // CTAs per head: 5
constexpr int kLd = kN * kKeys;                       // P's row stride (floats): 640, every slice's rows aligned
constexpr int kNq = (kS + kRowsBlk - 1) / kRowsBlk;   // query blocks: 10
constexpr int kRing = 8;                              // slots of partial sums: ≥ 2L + 2 for L ≤ 3
constexpr int kPartBytes = kRing * kN * kRowsBlk * 4;  // [slot][rank][row] floats
constexpr int kSmem = 200 * 1024;                     // one CTA per SM, as the real kernels (~225 KB)

__device__ __forceinline__ unsigned cta_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ std::uint32_t remote(const void* p, unsigned rank) {
  std::uint32_t out;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(out) : "r"(sa(p)), "r"(rank));
  return out;
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}
__device__ __forceinline__ void wait_cluster(std::uint64_t* b, unsigned parity) {
  unsigned done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(sa(b)), "r"(parity)
        : "memory");
  } while (!done);
}

// mode: -1 local (clusters of gridDim's cluster size, no exchange), L ≥ 0 exchange with lag L.
__global__ void __launch_bounds__(kThreads, 1)
    stream_kernel(const float* __restrict__ P, const float* __restrict__ tiles, float* __restrict__ out, int mode,
                  int work, int csize) {
  extern __shared__ float4 smem4[];
  float* part = reinterpret_cast<float*>(smem4);
  std::uint64_t* bar = reinterpret_cast<std::uint64_t*>(reinterpret_cast<char*>(smem4) + kPartBytes);
  const int t = static_cast<int>(threadIdx.x), row = t >> 2, quarter = t & 3;
  const int64_t bh = blockIdx.x / kN;
  const unsigned rank = csize > 1 ? cta_rank() : static_cast<unsigned>(blockIdx.x % kN);
  const bool exchange = mode >= 0;
  if (exchange && t == 0) {
    for (int s = 0; s < kRing; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(&bar[s])), "r"(kN - 1));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (exchange) cluster_sync_all();  // every partner's barriers initialised before any remote arrive
  __syncthreads();
  float keep = 0.0f;
  const int lag = exchange ? mode : 0;
  for (int qb = 0; qb < kNq + lag; ++qb) {
    if (qb < kNq) {
      const int q = qb * kRowsBlk + row;
      float sum = 0.0f;
      if (q < kS) {
        const float4* pr = reinterpret_cast<const float4*>(P + (bh * kS + q) * kLd + rank * kKeys + quarter * 32);
        const float4* tr = reinterpret_cast<const float4*>(tiles + (bh * kS + q) * 64 + quarter * 16);
        float4 pv[8], tv[4];
#pragma unroll
        for (int i = 0; i < 8; ++i) pv[i] = __ldg(pr + i);
#pragma unroll
        for (int i = 0; i < 4; ++i) tv[i] = __ldg(tr + i);
        float tsum = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) tsum += tv[i].x + tv[i].y + tv[i].z + tv[i].w;
        float acc = tsum;
        for (int i = 0; i < work; ++i) acc = fmaf(acc, 0.999f, 1e-3f);
        keep += acc;
#pragma unroll
        for (int i = 0; i < 8; ++i) sum += (pv[i].x + pv[i].y) + (pv[i].z + pv[i].w);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int slot = qb % kRing;
      if (!exchange) {
        if (quarter == 0 && q < kS) out[(bh * kN + rank) * kS + q] = sum;
      } else {
        float* mine = part + (slot * kN + rank) * kRowsBlk + row;
        if (quarter == 0) {
          *mine = sum;
          for (unsigned pr = 0; pr < kN; ++pr)
            if (pr != rank)
              asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote(mine, pr)), "f"(sum) : "memory");
          asm volatile("fence.acq_rel.cluster;" ::: "memory");  // the writer's own stores, before the barrier below
        }
        __syncthreads();  // every row's stores before thread 0's release to the partners
        if (t == 0)
          for (unsigned pr = 0; pr < kN; ++pr)
            if (pr != rank)
              asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote(&bar[slot], pr))
                           : "memory");
      }
    }
    if (exchange && qb >= lag) {  // block qb − lag: every partner's partial sums in
      const int s = qb - lag, slot = s % kRing;
      wait_cluster(&bar[slot], static_cast<unsigned>((s / kRing) & 1));
      const int q = s * kRowsBlk + row;
      if (quarter == 0) {
        float d = 0.0f;
        for (int k = 0; k < kN; ++k) d += part[(slot * kN + k) * kRowsBlk + row];
        keep += d * 1e-30f;
        if (rank == 0 && q < kS) out[bh * kS + q] = d;
      }
    }
  }
  if (exchange) cluster_sync_all();  // no CTA leaves while a partner may still write to it
  if (keep == 12345.0f) out[0] = keep;  // keeps the FMA chain
}

float launch(const float* P, const float* tiles, float* out, int heads, int mode, int work, int csize) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(heads * kN);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = csize, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
  cfg.attrs = &attr, cfg.numAttrs = 1;
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < 13; ++i) {
    CK(cudaEventRecord(a));
    CK(cudaLaunchKernelEx(&cfg, stream_kernel, P, tiles, out, mode, work, csize));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float m = 0.0f;
    CK(cudaEventElapsedTime(&m, a, b));
    if (i >= 3) ms.push_back(m);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int heads = argc > 1 ? std::atoi(argv[1]) : 368;
  std::vector<int> works;
  for (int i = 2; i < argc; ++i) works.push_back(std::atoi(argv[i]));
  if (works.empty()) works = {0, 256};
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const std::size_t np = static_cast<std::size_t>(heads) * kS * kLd, nt = static_cast<std::size_t>(heads) * kS * 64;
  const std::size_t no = static_cast<std::size_t>(heads) * kN * kS;
  float *P, *tiles, *out;
  CK(cudaMalloc(&P, np * 4));
  CK(cudaMalloc(&tiles, nt * 4));
  CK(cudaMalloc(&out, no * 4));
  {  // P: small distinct values (sums exact enough to compare bit for bit between modes: the same adds, same order)
    std::vector<float> h(np);
    std::uint32_t x = 12345u;
    for (auto& v : h) x = x * 1664525u + 1013904223u, v = static_cast<float>(x >> 9) * 1e-7f;
    CK(cudaMemcpy(P, h.data(), np * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(tiles, 0, nt * 4));
  }
  std::printf("%s: %d SMs; %d heads × %d CTAs of %d keys, %d query blocks each; P %.0f MB\n", prop.name,
              prop.multiProcessorCount, heads, kN, kKeys, kNq, np * 4 / 1e6);
  // the local mode's partial sums, added in rank order on the host: the δ every exchange mode must give
  CK(cudaMemset(out, 0, no * 4));
  launch(P, tiles, out, heads, -1, 0, 1);
  std::vector<float> parts(no), want(static_cast<std::size_t>(heads) * kS), got(want.size());
  CK(cudaMemcpy(parts.data(), out, no * 4, cudaMemcpyDeviceToHost));
  for (int bh = 0; bh < heads; ++bh)
    for (int q = 0; q < kS; ++q) {
      float d = 0.0f;
      for (int k = 0; k < kN; ++k) d += parts[(static_cast<std::size_t>(bh) * kN + k) * kS + q];
      want[static_cast<std::size_t>(bh) * kS + q] = d;
    }
  for (int work : works) {
    const float t_local = launch(P, tiles, out, heads, -1, work, 1);
    const float t_local5 = launch(P, tiles, out, heads, -1, work, kN);
    // one CTA per SM: a CTA's block step takes about the time over the steps each SM runs
    const double steps_per_sm = static_cast<double>(heads) * kN * kNq / prop.multiProcessorCount;
    std::printf("work %4d: local   %8.1f us (~%.2f us per CTA block step)\n", work, t_local * 1e3,
                t_local * 1e3 / steps_per_sm);
    std::printf("work %4d: local5  %8.1f us (x%.3f)\n", work, t_local5 * 1e3, t_local5 / t_local);
    for (int lag = 0; lag <= 3; ++lag) {
      CK(cudaMemset(out, 0xff, no * 4));
      const float tx = launch(P, tiles, out, heads, lag, work, kN);
      CK(cudaMemcpy(got.data(), out, got.size() * 4, cudaMemcpyDeviceToHost));
      const bool same = std::memcmp(got.data(), want.data(), got.size() * 4) == 0;
      std::printf("work %4d: x%d      %8.1f us (x%.3f against local, x%.3f against local5) delta %s\n", work, lag,
                  tx * 1e3, tx / t_local, tx / t_local5, same ? "same bits" : "DIFFERENT");
    }
  }
  CK(cudaFree(P));
  CK(cudaFree(tiles));
  CK(cudaFree(out));
  return 0;
}
