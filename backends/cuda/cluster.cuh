// Thread-block clusters from device code (sm_90 and later: every target of the fast path, sm_90a and sm_100a).
#pragma once

#include <cstdint>

namespace attnbwd::cuda {

// All threads of every CTA of the cluster meet; each thread's earlier memory writes (global and shared) are visible
// to the others' later reads (release / acquire at cluster scope).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// This CTA's rank in its cluster.
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The shared::cluster address of `p` (a shared-memory pointer of this CTA) in the CTA of rank `rank` of the cluster.
__device__ __forceinline__ std::uint32_t cluster_map(const void* p, unsigned rank) {
  const auto local = static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
  std::uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}

// 16 bytes from a shared::cluster address (16-byte aligned).
__device__ __forceinline__ uint4 cluster_ld16(std::uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

}  // namespace attnbwd::cuda
