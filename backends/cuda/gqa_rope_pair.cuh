// gqa_rope_backward's RoPE backward of one pair, shared by the merge pass (gqa_rope_backward.cu) and the small
// attention kernels' merged epilogues (gqa_rope_backward_attn.cu): the same math in the same order, so both give the
// same bits.
#pragma once

#include <cuda_bf16.h>

namespace attnbwd::cuda {

// RoPE backward of one pair (g0 at d, g1 at d + D/2; cos c0, c1 and sin s0, s1 at the same columns): u = g⊙c,
// w = g⊙s (each rounded to bf16), then out0 = u0 + w1, out1 = u1 − w0 (each rounded).
__device__ __forceinline__ void rope_pair(float g0, float g1, float c0, float c1, float s0, float s1,
                                          __nv_bfloat16& o0, __nv_bfloat16& o1) {
  const auto r16 = [](float x) { return __bfloat162float(__float2bfloat16_rn(x)); };
  const float u0 = r16(g0 * c0), u1 = r16(g1 * c1), w0 = r16(g0 * s0), w1 = r16(g1 * s1);
  o0 = __float2bfloat16_rn(u0 + w1);
  o1 = __float2bfloat16_rn(u1 - w0);
}

}  // namespace attnbwd::cuda
