// Emulation of the reference's bf16 rounding points for the serial oracle (spec §2, §3).
//
// The oracle keeps every value in double. Where PyTorch produces a bf16 tensor, the oracle rounds
// the double to the bf16 value PyTorch would produce, and keeps it as a (bf16-exact) double:
//  * GEMM and reduction results: accumulated exactly (double), rounded once (round_bf16);
//  * element-wise ops on bf16 tensors: PyTorch computes them in fp32 ("opmath") and rounds the
//    fp32 result to bf16; Python scalars enter them as float(scalar).
// A rounding policy bundles these, so one templated code path serves both the bf16 oracle
// (RoundLikeReference) and the exact double math that tests compare with finite differences
// (NoRounding).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "attnbwd/bf16.hpp"
#include "serial/loops.hpp"

namespace attnbwd::serial {

// Correctly rounded double -> bf16 (nearest, ties to even).
//
// Going double -> float -> bf16 with round-to-nearest twice is wrong near bf16 halfway points: a
// double just above a halfway point can round to the halfway point itself in float, and the second
// rounding then breaks the tie to even, possibly downwards. So the first step rounds to odd
// instead: truncate toward zero, and if anything was lost set the float's last significand bit.
// An inexact result then never sits on a bf16 halfway point (float carries 16 more significand
// bits than bf16; 2 would do), so the final float -> bf16 rounding sees the right side of every
// halfway point. This holds for subnormals too (bf16 and float share the exponent range).
inline bf16 round_bf16(double x) {
  if (std::isnan(x)) return bf16(static_cast<float>(x));
  float f = static_cast<float>(x);  // nearest; may be inf when |x| > FLT_MAX
  if (static_cast<double>(f) != x) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(x)) f = std::nextafter(f, 0.0f);
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u |= 1u;  // sticky bit: "inexact"
    std::memcpy(&f, &u, sizeof f);
  }
  return bf16(f);  // float -> bf16, nearest even
}

// bf16 tensor times a bf16 tensor or a Python scalar, as PyTorch does it: fp32 product, rounded.
inline bf16 mul_bf16(bf16 a, float b) { return bf16(a.to_float() * b); }

// bf16 + bf16, as PyTorch does it: fp32 sum, rounded.
inline bf16 add_bf16(bf16 a, bf16 b) { return bf16(a.to_float() + b.to_float()); }

// One element of the softmax backward, P⊙(dP − r), done in fp32 on upcast P and dP, then cast to
// bf16 (spec §3 step 4): an fp32 subtract, an fp32 multiply, one rounding to bf16.
inline bf16 softmax_grad_bf16(bf16 p, bf16 dp, float row_sum) {
  return bf16(p.to_float() * (dp.to_float() - row_sum));
}

// The rounding policy of the bf16 oracle. Arguments are bf16-exact doubles (except `b` of mul,
// which may be a Python scalar); results are bf16-exact doubles.
struct RoundLikeReference {
  // A GEMM or reduction result, accumulated exactly: one rounding.
  static double result(double x) { return round_bf16(x).to_float(); }
  static double mul(double a, double b) {
    return mul_bf16(bf16(static_cast<float>(a)), static_cast<float>(b)).to_float();
  }
  static double add(double a, double b) {
    return add_bf16(bf16(static_cast<float>(a)), bf16(static_cast<float>(b))).to_float();
  }
  // `row_sum` is r = Σ P·dP summed in double: the fp32 products of two bf16 values are exact, and
  // the reference's fp32 sum (order unknown) is approximated by its correctly rounded value.
  static double softmax_grad(double p, double dp, double row_sum) {
    return softmax_grad_bf16(bf16(static_cast<float>(p)), bf16(static_cast<float>(dp)),
                             static_cast<float>(row_sum))
        .to_float();
  }
};

// Exact math: the same code path with every rounding removed (tests only).
struct NoRounding {
  static double result(double x) { return x; }
  static double mul(double a, double b) { return a * b; }
  static double add(double a, double b) { return a + b; }
  static double softmax_grad(double p, double dp, double row_sum) { return p * (dp - row_sum); }
};

// C = op(A)·op(B) as the reference's GEMM produces it under policy R: exact accumulation, one
// rounding per element. Arguments as for serial::gemm. Runs gemm over tiles of C so a tile stays in
// cache across the k loop (gemm alone streams all of C once per k); every element still sums its
// terms in ascending k, so tiling does not change a bit.
template <class R, class TA, class TB>
void rounded_gemm(std::int64_t M, std::int64_t N, std::int64_t K, const TA* A, std::int64_t lda,
                  bool trans_a, const TB* B, std::int64_t ldb, bool trans_b, double* C,
                  std::int64_t ldc) {
  constexpr std::int64_t kTileM = 64, kTileN = 256;  // 128 KiB of C
  for (std::int64_t i0 = 0; i0 < M; i0 += kTileM) {
    const std::int64_t m = M - i0 < kTileM ? M - i0 : kTileM;
    for (std::int64_t j0 = 0; j0 < N; j0 += kTileN) {
      const std::int64_t n = N - j0 < kTileN ? N - j0 : kTileN;
      double* c = C + i0 * ldc + j0;
      gemm(m, n, K, trans_a ? A + i0 : A + i0 * lda, lda, trans_a, trans_b ? B + j0 * ldb : B + j0,
           ldb, trans_b, c, ldc);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = R::result(c[i * ldc + j]);
    }
  }
}

}  // namespace attnbwd::serial
