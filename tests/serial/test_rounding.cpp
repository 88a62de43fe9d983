// The bf16 rounding-point emulation of the serial oracle (backends/serial/rounding.hpp).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/rng.hpp"
#include "serial/rounding.hpp"
#include "tests/common/seed.hpp"

namespace attnbwd::serial {
namespace {

const double kUlp1 = std::ldexp(1.0, -7);  // bf16 spacing in [1, 2)

std::uint16_t bits_of(double x) { return round_bf16(x).bits; }
double value(std::uint16_t b) { return bf16::from_bits(b).to_float(); }
// The naive conversion round_bf16 must not be: nearest float, then nearest bf16.
std::uint16_t naive_bits(double x) { return bf16(static_cast<float>(x)).bits; }

// An independent reference: binary search of the positive finite bf16 values (bits 0..0x7F7F are
// increasing), then nearest with ties to the even bit pattern. Beyond max + half a spacing: inf.
std::uint16_t reference_bits(double x) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= std::ldexp(2.0 - std::ldexp(1.0, -8), 127)) return sign | 0x7F80;
  std::uint16_t lo = 0, hi = 0x7F7F;  // largest m with value(m) <= a
  while (lo < hi) {
    const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
    if (value(mid) <= a)
      lo = mid;
    else
      hi = static_cast<std::uint16_t>(mid - 1);
  }
  const double up = lo == 0x7F7F ? std::ldexp(1.0, 128) : value(lo + 1);
  const double below = a - value(lo), above = up - a;
  const bool take_up = above < below || (above == below && (lo & 1));
  return sign | static_cast<std::uint16_t>(take_up ? lo + 1 : lo);
}

TEST(RoundBf16, EveryBf16ValueIsKept) {
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const double x = value(static_cast<std::uint16_t>(b));
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(round_bf16(x).to_float())) << b;
    } else {
      EXPECT_EQ(bits_of(x), b) << b;
    }
  }
}

TEST(RoundBf16, TiesGoToEven) {
  EXPECT_EQ(bits_of(1.0 + kUlp1 / 2), 0x3F80);      // 1.0 (even) beats 1 + 2^-7
  EXPECT_EQ(bits_of(1.0 + 3 * kUlp1 / 2), 0x3F82);  // 1 + 2^-6 (even) beats 1 + 2^-7
  EXPECT_EQ(bits_of(-(1.0 + kUlp1 / 2)), 0xBF80);
  EXPECT_EQ(bits_of(std::ldexp(1.0 + kUlp1 / 2, 100)), 0x7180);
  EXPECT_EQ(bits_of(std::ldexp(1.0, -134)), 0x0000);  // half the smallest subnormal -> 0
  EXPECT_EQ(bits_of(std::ldexp(3.0, -134)), 0x0002);  // 1.5 subnormal spacings -> 2
}

// Each x lies just off a bf16 halfway point, close enough that the nearest float is the halfway
// point itself: the naive double -> float -> bf16 path breaks the tie the wrong way.
TEST(RoundBf16, NoDoubleRounding) {
  struct Case {
    double x;
    std::uint16_t expected;
  };
  const Case cases[] = {
      {1.0 + kUlp1 / 2 + std::ldexp(1.0, -40), 0x3F81},
      {-(1.0 + kUlp1 / 2 + std::ldexp(1.0, -40)), 0xBF81},
      {1.0 + 3 * kUlp1 / 2 - std::ldexp(1.0, -40), 0x3F81},
      {std::ldexp(1.0, -134) + std::ldexp(1.0, -160), 0x0001},  // subnormal halfway point
  };
  for (const Case& c : cases) {
    EXPECT_EQ(bits_of(c.x), c.expected) << c.x;
    EXPECT_NE(naive_bits(c.x), c.expected) << "case does not exercise double rounding: " << c.x;
  }
}

TEST(RoundBf16, TinyHugeNanInf) {
  const double inf = std::numeric_limits<double>::infinity();
  const double bf16_max = value(0x7F7F);
  const double overflow_tie = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);
  EXPECT_EQ(bits_of(0.0), 0x0000);
  EXPECT_EQ(bits_of(-0.0), 0x8000);
  EXPECT_EQ(bits_of(1e-50), 0x0000);
  EXPECT_EQ(bits_of(-1e-50), 0x8000);
  EXPECT_EQ(bits_of(std::ldexp(1.0, -133)), 0x0001);
  EXPECT_EQ(bits_of(std::ldexp(1.0, -134) * 1.0000001), 0x0001);
  EXPECT_EQ(bits_of(bf16_max), 0x7F7F);
  EXPECT_EQ(bits_of(overflow_tie * (1 - 1e-15)), 0x7F7F);
  EXPECT_EQ(bits_of(overflow_tie), 0x7F80);  // the tie goes to the even pattern: inf
  EXPECT_EQ(bits_of(static_cast<double>(FLT_MAX)), 0x7F80);
  EXPECT_EQ(bits_of(1e39), 0x7F80);
  EXPECT_EQ(bits_of(-1e300), 0xFF80);
  EXPECT_EQ(bits_of(inf), 0x7F80);
  EXPECT_EQ(bits_of(-inf), 0xFF80);
  EXPECT_TRUE(std::isnan(round_bf16(std::nan("")).to_float()));
}

TEST(RoundBf16, MatchesReferenceOnRandomDoubles) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(1));
  for (int n = 0; n < 200000; ++n) {
    // Any magnitude from below the subnormals to beyond the overflow threshold.
    const double mant = 1.0 + rng.uniform();
    const int exp = static_cast<int>(rng.uniform() * 290) - 150;
    const double x = (rng.uniform() < 0.5 ? -1 : 1) * std::ldexp(mant, exp);
    ASSERT_EQ(bits_of(x), reference_bits(x)) << x;
  }
  for (int n = 0; n < 200000; ++n) {
    // A few double ulps around a random halfway point between adjacent finite bf16 values.
    const auto b = static_cast<std::uint16_t>(rng.next() % 0x7F7F);
    const double mid = (value(b) + value(b + 1)) / 2;
    const int steps = static_cast<int>(rng.next() % 7) - 3;
    double x = mid;
    for (int s = 0; s < std::abs(steps); ++s) x = std::nextafter(x, steps > 0 ? 1e300 : 0.0);
    ASSERT_EQ(bits_of(x), reference_bits(x)) << x;
  }
}

// PyTorch's bf16 × Python scalar: an fp32 product of float(a) and float(scalar), then one rounding.
TEST(Opmath, MulIsAnFp32ProductRoundedToBf16) {
  const float fs = static_cast<float>(0.08838834764831845);  // the benchmark's scaling, 1/√128
  for (std::uint32_t b = 0; b < 0x7F80; ++b) {
    const bf16 a = bf16::from_bits(static_cast<std::uint16_t>(b));
    // The exact product rounded once to float is what an fp32 multiply returns.
    const double fp32_product = static_cast<float>(static_cast<double>(a.to_float()) * fs);
    ASSERT_EQ(mul_bf16(a, fs).bits, naive_bits(fp32_product)) << b;
  }
  // The fp32 product can round onto a bf16 halfway point: (1 + 2^-7)·b is 5.8e-8 above
  // 1 + 2^-8, rounds to it in fp32, and the tie then goes to 1.0; exact rounding gives 1 + 2^-7.
  const bf16 a = bf16::from_bits(0x3F81);
  const float b = std::nextafter(static_cast<float>(257.0 / 258.0), 2.0f);
  EXPECT_EQ(mul_bf16(a, b).bits, 0x3F80);
  EXPECT_EQ(bits_of(a.to_float() * static_cast<double>(b)), 0x3F81);
  // A Python scalar enters as float(scalar): 1 + 2^-8 + 2^-30 becomes 1 + 2^-8, a tie -> 1.0.
  const double scalar = 1.0 + kUlp1 / 2 + std::ldexp(1.0, -30);
  EXPECT_EQ(mul_bf16(bf16(1.0f), static_cast<float>(scalar)).bits, 0x3F80);
  EXPECT_EQ(bits_of(scalar), 0x3F81);
}

TEST(Opmath, AddRoundsTheFp32Sum) {
  const bf16 one(1.0f), half_ulp(static_cast<float>(kUlp1 / 2));
  EXPECT_EQ(add_bf16(one, half_ulp).bits, 0x3F80);                      // tie -> even
  EXPECT_EQ(add_bf16(bf16::from_bits(0x3F81), half_ulp).bits, 0x3F82);  // tie -> even
  EXPECT_EQ(add_bf16(bf16::from_bits(0x7F7F), bf16::from_bits(0x7F7F)).bits, 0x7F80);
}

// r enters the fp32 subtraction as a float: r = 1 + 0.75·2^-24 becomes 1.0f, so dS = 1·(1 − r)
// is 0, where exact math gives −0.75·2^-24.
TEST(Opmath, SoftmaxGradIsFp32OnFloatRowSum) {
  const double r = 1.0 + 0.75 * std::ldexp(1.0, -24);
  EXPECT_EQ(RoundLikeReference::softmax_grad(1.0, 1.0, r), 0.0);
  EXPECT_EQ(NoRounding::softmax_grad(1.0, 1.0, r), -0.75 * std::ldexp(1.0, -24));
  // An fp32 subtract and multiply, then one rounding: 0.5·(1 − 2^-9) = 0.5 − 2^-10, a bf16 tie.
  EXPECT_EQ(RoundLikeReference::softmax_grad(0.5, 1.0, std::ldexp(1.0, -9)), 0.5);
}

TEST(Policies, RoundLikeReferenceRoundsNoRoundingDoesNot) {
  const double x = 1.0 + kUlp1 / 2 + std::ldexp(1.0, -40);
  EXPECT_EQ(RoundLikeReference::result(x), 1.0 + kUlp1);
  EXPECT_EQ(NoRounding::result(x), x);
  EXPECT_EQ(RoundLikeReference::mul(1.0 + kUlp1, 1.0 + kUlp1), 1.0 + 2 * kUlp1);  // 1+2^-6+2^-14
  EXPECT_EQ(NoRounding::mul(1.0 + kUlp1, 1.0 + kUlp1), (1.0 + kUlp1) * (1.0 + kUlp1));
  EXPECT_EQ(RoundLikeReference::add(1.0, kUlp1 / 2), 1.0);
  EXPECT_EQ(NoRounding::add(1.0, kUlp1 / 2), 1.0 + kUlp1 / 2);
}

// rounded_gemm tiles C; the result must equal one plain gemm call rounded element by element.
TEST(RoundedGemm, EqualsPlainGemmThenRounding) {
  ATTNBWD_SEED_TRACE();
  Rng rng(test::fresh_seed(2));
  const std::int64_t M = 70, N = 300, K = 9;  // partial tiles in both directions
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<bf16> A(M * K), B(K * N);
      for (auto& a : A) a = bf16(static_cast<float>(rng.normal()));
      for (auto& b : B) b = bf16(static_cast<float>(rng.normal()));
      const std::int64_t lda = ta ? M : K, ldb = tb ? K : N;
      std::vector<double> plain(M * N), tiled(M * N, std::nan(""));
      gemm(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, plain.data(), N);
      rounded_gemm<RoundLikeReference>(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, tiled.data(),
                                       N);
      for (std::int64_t e = 0; e < M * N; ++e)
        ASSERT_EQ(tiled[e], round_bf16(plain[e]).to_float()) << e << " ta=" << ta << " tb=" << tb;
    }
}

}  // namespace
}  // namespace attnbwd::serial
