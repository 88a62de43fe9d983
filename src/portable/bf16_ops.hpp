// The element-wise steps of the bf16 ops (spec §2, §3) as the reference computes them: fp32
// arithmetic on bf16 values, one round-to-nearest-even at each rounding point the spec lists. The
// serial oracle emulates the same points (backends/serial/rounding.hpp).
//
// Intermediates travel as floats holding bf16-exact values: the fp32 GEMMs that consume them then
// need no separate upcast pass, and a float round-trip through bf16 is exact.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "attnbwd/bf16.hpp"

// Own namespace: the fp32 ops' kernels may name their steps alike (an inline function defined twice
// with different bodies would silently break one of them).
namespace attnbwd::portable::bf16_ops {

// x rounded to the nearest bf16, kept as a float.
KOKKOS_INLINE_FUNCTION float round_bf16(float x) { return bf16(x).to_float(); }

// One element of the softmax backward (spec §3 step 4): dS = bf16(P·(dP − r)) in fp32, then the
// bf16 tensor times float(scaling), rounded again.
KOKKOS_INLINE_FUNCTION float softmax_grad(float p, float dp, float r, float scaling) {
  return round_bf16(round_bf16(p * (dp - r)) * scaling);
}

// Element d of the rotate-half RoPE backward (spec §3 step 7) of one row g (bf16-exact floats, D =
// 2·half wide) with that token's tables c, s: u = bf16(g·c), w = bf16(g·s), and
// g_pre[d] = bf16(u[d] + w[d+half]) for d < half, bf16(u[d] − w[d−half]) otherwise.
KOKKOS_INLINE_FUNCTION float rope_backward(const float* g, const bf16* c, const bf16* s, int d, int half) {
  const float u = round_bf16(g[d] * c[d].to_float());
  const int p = d < half ? d + half : d - half;
  const float w = round_bf16(g[p] * s[p].to_float());
  return round_bf16(d < half ? u + w : u - w);
}

// x[i] = bf16(x[i]): a GEMM result held for later GEMMs and kernels as a bf16-exact float.
template <class ExecSpace>
void round_in_place(const ExecSpace& exec, float* x, std::int64_t n) {
  Kokkos::parallel_for(
      "attnbwd::round_in_place", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) { x[i] = round_bf16(x[i]); });
}

// sum[i] = bf16(bf16(sum[i]) + bf16(y[i])): one of the reference's bf16 tensor additions, whose
// operands are bf16 GEMM results (sum and y may hold them unrounded; rounding a bf16-exact value
// again changes nothing). When `out` is given the sum is also stored there as bf16.
template <class ExecSpace>
void add_rounded(const ExecSpace& exec, float* sum, const float* y, bf16* out, std::int64_t n) {
  Kokkos::parallel_for(
      "attnbwd::add_rounded", Kokkos::RangePolicy<ExecSpace>(exec, 0, n), KOKKOS_LAMBDA(const std::int64_t i) {
        const float s = round_bf16(round_bf16(sum[i]) + round_bf16(y[i]));
        sum[i] = s;
        if (out != nullptr) out[i] = bf16(s);
      });
}

}  // namespace attnbwd::portable::bf16_ops
