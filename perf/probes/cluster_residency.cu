// Probe (not part of the library, not built by CMake): how many thread-block clusters of 1-8 CTAs of the thin q/k/v
// kernel's shape (384 threads, 225 KB of dynamic shared memory: one CTA per SM) the device holds at once
// (cudaOccupancyMaxActiveClusters), and so how many CTAs in clusters of each size. For the multicast lead of
// perf/NOTES.md (forty-second session): a TMA multicast of dY's tile across clusters of slices needs 120 CTAs in
// clusters of 2 (or 40 slices' 3 ranges in clusters of 3, 6) resident at once.
//   nvcc -std=c++17 -O2 -arch=sm_90a -o cluster_residency perf/probes/cluster_residency.cu
#include <cuda_runtime.h>

#include <cstdio>

__global__ void shaped_kernel(int* out) {
  extern __shared__ int smem[];
  if (out != nullptr) out[blockIdx.x] = smem[threadIdx.x];
}

int main() {
  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return 1;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  const int smem = 225 * 1024 + 1024 + 256 - 2048;  // ~ the thin kernel's Cfg::kSmem (one CTA per SM either way)
  cudaFuncSetAttribute(shaped_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  cudaFuncSetAttribute(shaped_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  std::printf("%s: %d SMs, dynamic shared memory %d bytes per CTA\n", prop.name, sms, smem);
  for (int size = 1; size <= 16; ++size) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(size);
    cfg.blockDim = dim3(384);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = size, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    int clusters = 0;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, shaped_kernel, &cfg);
    if (e != cudaSuccess) {
      std::printf("cluster size %2d: %s\n", size, cudaGetErrorString(e));
      cudaGetLastError();
      continue;
    }
    std::printf("cluster size %2d: %3d clusters resident at once = %3d CTAs\n", size, clusters, clusters * size);
  }
  return 0;
}
