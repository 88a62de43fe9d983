// Probe (not part of the library, not built by CMake): does a kernel on a high-priority stream get SMs ahead of the
// pending CTAs of a long low-priority grid that was launched first — directly, and in a CUDA graph captured from the
// two streams and instantiated with cudaGraphInstantiateFlagUseNodePriority (and without it)?
// The thirty-second session's CUPTI timelines of gqa_rope_backward showed the attention chain's next kernel waiting
// for a side-stream GEMM's last wave (dWo: ~1,000 short CTAs) with and without ATTNBWD_CUDA_GRAPH_PRIORITY=on.
// Grid A ("side"): 40 CTAs per SM, each holding a whole SM (200 KB of dynamic shared memory) and spinning 2 µs on the
// global timer: ~80 µs in all. Grid B ("chain"): one CTA per SM, 1 µs each, launched right after A on the other stream.
// Reported: B's first CTA start, B's end and A's end, in µs from A's first CTA start (globaltimer).
// Build and run on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90a -o probe perf/probes/stream_priority.cu && ./probe
#include <cstdint>
#include <cstdio>

#include "probe_check.cuh"

__device__ __forceinline__ std::uint64_t now() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// t[0]: first start (min), t[1]: last end (max).
__global__ void spin(unsigned long long* t, std::uint64_t ns) {
  extern __shared__ unsigned char smem[];
  const std::uint64_t t0 = now();
  if (threadIdx.x == 0) {
    atomicMin(&t[0], t0);
    smem[0] = 1;
  }
  while (now() - t0 < ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(&t[1], now());
}

int main() {
  int sms = 0, least = 0, greatest = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  const int smem = 200 * 1024;
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  std::printf("SMs %d, stream priorities least %d greatest %d\n", sms, least, greatest);
  unsigned long long* t = nullptr;
  CK(cudaMalloc(&t, 4 * sizeof(unsigned long long)));
  const unsigned long long init[4] = {~0ull, 0, ~0ull, 0};
  cudaStream_t lo, hi, eq, launch;
  CK(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, least));
  CK(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
  CK(cudaStreamCreateWithPriority(&eq, cudaStreamNonBlocking, least));
  CK(cudaStreamCreateWithPriority(&launch, cudaStreamNonBlocking, least));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  // Enqueues A on `a_stream` and B on `b_stream` (forked from `root`, joined back).
  auto enqueue = [&](cudaStream_t root, cudaStream_t a_stream, cudaStream_t b_stream) {
    CK(cudaEventRecord(fork, root));
    CK(cudaStreamWaitEvent(a_stream, fork, 0));
    spin<<<40 * sms, 128, smem, a_stream>>>(t, 2000);
    CK(cudaGetLastError());
    if (b_stream != root) CK(cudaStreamWaitEvent(b_stream, fork, 0));
    spin<<<sms, 128, smem, b_stream>>>(t + 2, 1000);
    CK(cudaGetLastError());
    CK(cudaEventRecord(join, a_stream));
    CK(cudaStreamWaitEvent(root, join, 0));
    if (b_stream != root) {
      CK(cudaEventRecord(join, b_stream));
      CK(cudaStreamWaitEvent(root, join, 0));
    }
  };
  auto report = [&](const char* what) {
    unsigned long long h[4];
    CK(cudaMemcpy(h, t, sizeof h, cudaMemcpyDeviceToHost));
    std::printf("%-44s B starts %8.1f  B ends %8.1f  A ends %8.1f  (us from A's start)\n", what,
                (double(h[2]) - double(h[0])) * 1e-3, (double(h[3]) - double(h[0])) * 1e-3,
                (double(h[1]) - double(h[0])) * 1e-3);
  };
  auto reset = [&] { CK(cudaMemcpy(t, init, sizeof init, cudaMemcpyHostToDevice)); };

  for (int rep = 0; rep < 2; ++rep) {
    reset();
    enqueue(launch, lo, hi);
    CK(cudaDeviceSynchronize());
    report("direct: A low, B high");
    reset();
    enqueue(launch, lo, eq);
    CK(cudaDeviceSynchronize());
    report("direct: A low, B equal");
    for (int flag = 0; flag < 2; ++flag) {
      // Captured as the library does: the chain on the capture stream (hi), the side work on a forked stream (lo).
      cudaGraph_t g;
      cudaGraphExec_t x;
      CK(cudaStreamBeginCapture(hi, cudaStreamCaptureModeThreadLocal));
      enqueue(hi, lo, hi);
      CK(cudaStreamEndCapture(hi, &g));
      CK(cudaGraphInstantiateWithFlags(&x, g, flag ? cudaGraphInstantiateFlagUseNodePriority : 0));
      reset();
      CK(cudaGraphLaunch(x, launch));
      CK(cudaDeviceSynchronize());
      report(flag ? "graph (UseNodePriority): A low, B high" : "graph (no flag): A low, B high");
      CK(cudaGraphExecDestroy(x));
      CK(cudaGraphDestroy(g));
    }
  }
  return 0;
}
