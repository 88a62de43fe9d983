// Probe (not part of the library, not built by CMake): does a latency-bound grid run slower, in µs and in its own SM
// cycles, while another grid is resident on other SMs, even one that only spins? The forty-ninth session's timelines
// of gqa #11 (perf/NOTES.md) showed the small attention path's first kernel (mma.sync, 4 warps per CTA) take ~2.2x as
// long beside any resident CTAs of the small-K grad_o_weight kernel, down to 16 CTAs that only spin on clock64.
// Grid "chase": 64 CTAs of 128 threads; every thread follows a random pointer ring through an L2-resident 4 MB buffer
//   (`steps` dependent loads), or (mode alu) a chain of dependent FMAs; each CTA records clock64 and %globaltimer at
//   its start and end.
// Grid "spin": N CTAs of 128 threads with K KB of dynamic shared memory, spinning 300 µs on %globaltimer, launched
//   first on another stream (so it is resident when chase starts).
// Grid "tiles" (cases tiles, prod tiles): dp_softmax's pattern (below); prod: a producer kernel rewrites its input just
//   before the fork. Cases graph / graph+pdl: the launches captured as one graph (forked, joined) and replayed, +pdl
//   with a programmatic dependent after the measured grid.
// Reported per case: the CTA durations (median and max) in ns and in cycles, and cycles per ns (the SM clock).
// Measured (forty-ninth session, H100): no slowdown in any case (perf/NOTES.md).
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o corun perf/probes/corun_latency.cu && ./corun
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "probe_check.cuh"

__device__ __forceinline__ std::uint64_t now() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// rec[4·b ..]: start ns, end ns, start cycles, end cycles of CTA b (thread 0).
__global__ void chase(const unsigned* __restrict__ ring, int steps, int alu, unsigned* sink,
                      unsigned long long* rec) {
  asm volatile("griddepcontrol.launch_dependents;");
  const std::uint64_t t0 = now();
  const long long c0 = clock64();
  unsigned i = (blockIdx.x * blockDim.x + threadIdx.x) * 977u % (1u << 20);
  float x = static_cast<float>(threadIdx.x);
  if (alu) {
    for (int s = 0; s < steps * 64; ++s) x = fmaf(x, 1.0000001f, 0.5f);
  } else {
    for (int s = 0; s < steps; ++s) i = __ldcg(ring + i);
  }
  if (i == 0xffffffffu || x == -1.0f) *sink = i;  // keeps the chain
  __syncthreads();
  if (threadIdx.x == 0) {
    const long long c1 = clock64();
    const std::uint64_t t1 = now();
    rec[4 * blockIdx.x] = t0, rec[4 * blockIdx.x + 1] = t1, rec[4 * blockIdx.x + 2] = c0, rec[4 * blockIdx.x + 3] = c1;
  }
}

// "tiles" (mode 2 of chase's launch): the library's small attention kernels' pattern — 4 warps, 172 KB of dynamic
// shared memory, 64 x 128 bf16 tiles (16 KB) streamed through two cp.async stages from a 32 MB buffer, each warp
// running ldmatrix + mma.sync m16n8k16 over its 16 rows of every tile.
__device__ __forceinline__ void cp16(unsigned dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__global__ void tiles(const unsigned short* __restrict__ buf, int ntiles, unsigned* sink, unsigned long long* rec) {
  extern __shared__ __align__(16) unsigned char sm[];
  asm volatile("griddepcontrol.launch_dependents;");
  const std::uint64_t t0 = now();
  const long long c0 = clock64();
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(sm));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[16][4] = {};
  auto issue = [&](int t, int st) {
    const unsigned short* src = buf + ((static_cast<long long>(blockIdx.x) * ntiles + t) % 2048) * 8192;
    for (int i = threadIdx.x; i < 1024; i += 128) cp16(base + st * 16384 + i * 16, src + i * 8);
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  issue(0, 0);
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) issue(t + 1, (t + 1) & 1);
    if (t + 1 < ntiles)
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    else
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    const unsigned tile = base + (t & 1) * 16384;
#pragma unroll
    for (int k = 0; k < 8; ++k) {  // 16-column steps of the 128
      unsigned a[4];
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                   : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                   : "r"(tile + ((warp * 16 + lane % 16) * 128 + k * 16 + (lane / 16) * 8) * 2));
#pragma unroll
      for (int j = 0; j < 16; ++j)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};"
                     : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(a[j % 4]), "r"(a[(j + 1) % 4]));
    }
    __syncthreads();
  }
  float x = 0;
  for (int j = 0; j < 16; ++j) x += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  if (x == -1.0f) *sink = 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    const long long c1 = clock64();
    const std::uint64_t t1 = now();
    rec[4 * blockIdx.x] = t0, rec[4 * blockIdx.x + 1] = t1, rec[4 * blockIdx.x + 2] = c0, rec[4 * blockIdx.x + 3] = c1;
  }
}

// The producer of the "prod" cases: rewrites tiles' 32 MB input just before the fork, as the library's dA GEMM writes
// the dO that the first small attention kernel reads (both successors of it then start together).
__global__ void produce(unsigned short* buf, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) buf[i] = 0;
}

// The dependent of chase in the pdl cases (a programmatic dependent launch: it waits for chase, as the library's
// second small attention kernel waits for the first).
__global__ void tail(unsigned* sink) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(sink, 1u);
}

__global__ void spin(std::uint64_t ns) {
  extern __shared__ unsigned char smem[];
  const std::uint64_t t0 = now();
  if (threadIdx.x == 0) smem[0] = 1;
  while (now() - t0 < ns) {
  }
}

int main() {
  const int n = 1 << 20, ctas = 64, steps = 400;
  std::vector<unsigned> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<unsigned> ring(n);
  for (int k = 0; k < n; ++k) ring[perm[k]] = perm[(k + 1) % n];  // one cycle through all n entries
  unsigned *d_ring = nullptr, *sink = nullptr;
  unsigned long long* rec = nullptr;
  CK(cudaMalloc(&d_ring, n * sizeof(unsigned)));
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  CK(cudaMalloc(&rec, 4 * ctas * sizeof(unsigned long long)));
  CK(cudaMemcpy(d_ring, ring.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CK(cudaFuncSetAttribute(tiles, cudaFuncAttributeMaxDynamicSharedMemorySize, 172 * 1024));
  unsigned short* d_buf = nullptr;  // 32 MB: 2048 tiles of 64 x 128 bf16
  CK(cudaMalloc(&d_buf, 2048 * 8192 * sizeof(unsigned short)));
  CK(cudaMemset(d_buf, 0, 2048 * 8192 * sizeof(unsigned short)));
  cudaStream_t s1, s2;
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  struct Case {
    const char* name;
    int spin_ctas, spin_kb, alu;
  };
  const Case cases[] = {{"chase alone", 0, 0, 0},           {"chase + spin 16 x 193 KB", 16, 193, 0},
                        {"chase + spin 16 x 1 KB", 16, 0, 0}, {"chase + spin 1 x 193 KB", 1, 193, 0},
                        {"chase + spin 64 x 193 KB", 64, 193, 0}, {"chase alone (again)", 0, 0, 0},
                        {"alu alone", 0, 0, 1},             {"alu + spin 16 x 193 KB", 16, 193, 1},
                        {"tiles alone", 0, 0, 2},           {"tiles + spin 16 x 193 KB", 16, 193, 2},
                        {"tiles + spin 64 x 1 KB", 64, 0, 2}, {"prod tiles alone", 0, 0, 3},
                        {"prod tiles + spin 16 x 193 KB", 16, 193, 3}};
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  for (int graph = 0; graph < 3; ++graph)
  for (int rep = 0; rep < 2; ++rep)
    for (const Case& c : cases) {
      CK(cudaDeviceSynchronize());
      if (graph) {  // the same two launches captured as one graph (s2 forked from s1 and joined), then replayed
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
        if (c.alu == 3) produce<<<264, 256, 0, s1>>>(d_buf, 2048 * 8192);
        CK(cudaEventRecord(fork, s1));
        CK(cudaStreamWaitEvent(s2, fork, 0));
        if (c.spin_ctas) spin<<<c.spin_ctas, 128, std::max(c.spin_kb, 1) * 1024, s2>>>(60000);
        if (c.alu >= 2)
          tiles<<<ctas, 128, 172 * 1024, s1>>>(d_buf, 150, sink, rec);
        else
          chase<<<ctas, 128, 0, s1>>>(d_ring, steps, c.alu, sink, rec);
        if (graph == 2) {
          cudaLaunchAttribute at[1];
          at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          at[0].val.programmaticStreamSerializationAllowed = 1;
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(64), cfg.blockDim = dim3(128), cfg.stream = s1, cfg.attrs = at, cfg.numAttrs = 1;
          CK(cudaLaunchKernelEx(&cfg, tail, sink));
        }
        CK(cudaEventRecord(join, s2));
        CK(cudaStreamWaitEvent(s1, join, 0));
        CK(cudaStreamEndCapture(s1, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        CK(cudaGraphLaunch(ge, s1));
        CK(cudaDeviceSynchronize());
        CK(cudaGraphLaunch(ge, s1));
        CK(cudaDeviceSynchronize());
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
      } else {
        if (c.alu == 3) {  // the producer first, then both successors of it (as in the graph)
          produce<<<264, 256, 0, s1>>>(d_buf, 2048 * 8192);
          CK(cudaEventRecord(fork, s1));
          CK(cudaStreamWaitEvent(s2, fork, 0));
        }
        if (c.spin_ctas) spin<<<c.spin_ctas, 128, std::max(c.spin_kb, 1) * 1024, s2>>>(300000);
        if (c.spin_ctas) {  // let the spin grid become resident first
          const auto t = std::chrono::steady_clock::now();
          while (std::chrono::steady_clock::now() - t < std::chrono::microseconds(50)) {
          }
        }
        if (c.alu >= 2)
          tiles<<<ctas, 128, 172 * 1024, s1>>>(d_buf, 150, sink, rec);
        else
          chase<<<ctas, 128, 0, s1>>>(d_ring, steps, c.alu, sink, rec);
      }
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<unsigned long long> r(4 * ctas);
      CK(cudaMemcpy(r.data(), rec, r.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
      std::vector<double> ns(ctas), cyc(ctas);
      for (int b = 0; b < ctas; ++b)
        ns[b] = double(r[4 * b + 1] - r[4 * b]), cyc[b] = double(r[4 * b + 3] - r[4 * b + 2]);
      std::vector<double> sn = ns, sc = cyc;
      std::sort(sn.begin(), sn.end());
      std::sort(sc.begin(), sc.end());
      std::printf("%s%-28s rep %d: CTA ns median %8.0f max %8.0f | cycles median %9.0f max %9.0f | GHz %.3f\n",
                  graph == 2 ? "graph+pdl " : graph ? "graph " : "", c.name, rep, sn[ctas / 2], sn[ctas - 1],
                  sc[ctas / 2], sc[ctas - 1], sc[ctas / 2] / sn[ctas / 2]);
    }
  return 0;
}
