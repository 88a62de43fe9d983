// Programmatic dependent launch from device code, for the arch-neutral kernels and the sm_90a ones alike. With a
// kernel launched by cudaLaunchAttributeProgrammaticStreamSerialization after another on the same stream: the earlier
// grid lets the later one start (once every CTA has issued griddep_launch_dependents or ended), and the later grid
// waits in griddep_wait until the earlier one has completed and its memory is visible. Without the launch attribute
// the wait returns at once. griddepcontrol exists from sm_90 on; below it both are empty, so a launcher must not
// make such machine code a programmatic dependent (gqa_small_attn_launch checks the kernel's binaryVersion).
#pragma once

#include <cuda_runtime_api.h>

namespace attnbwd::cuda {

// Host side: the launch attribute that makes a cudaLaunchKernelEx launch a programmatic dependent of the kernel queued
// just before it on the same stream (the launched kernel must call griddep_wait before it reads what that kernel writes).
inline cudaLaunchAttribute programmatic_dependent_attribute() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace attnbwd::cuda
