// How many clusters of n CTAs (n = 1..8) of the mha ws kernels' shape (384 threads, 230,472 bytes of dynamic shared
// memory, one CTA per SM) the GPU holds at once: cudaOccupancyMaxActiveClusters. A probe, not library code: it tells
// how many SMs ATTNBWD_CUDA_MHA_MCAST's clusters of a head's 5 CTAs can use (perf/NOTES.md, fifty-third session).
// Build and run on the GPU machine: nvcc -arch=sm_90a -o /tmp/cl perf/probes/cluster_occupancy.cu && /tmp/cl
#include <cuda_runtime.h>

#include <cstdio>

__global__ void probe_kernel(int* out) {
  extern __shared__ int smem[];
  if (threadIdx.x == 0 && out != nullptr) out[blockIdx.x] = smem[0];
}

int main() {
  const int threads = 384, smem = 230472;
  if (cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    std::printf("cudaFuncSetAttribute failed\n");
    return 1;
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  std::printf("SMs %d; CTA: %d threads, %d bytes of shared memory\n", sms, threads, smem);
  for (int n = 1; n <= 8; ++n) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(n);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(n * 64));
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, probe_kernel, &cfg);
    std::printf("cluster %d: %s, %d active clusters = %d SMs busy\n", n, cudaGetErrorString(e), clusters,
                clusters * n);
  }
  return 0;
}
