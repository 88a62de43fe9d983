// Output comparison: the benchmark's rule (spec §6: finite, |got - want| <= atol + rtol·|want| for at
// least `match_ratio` of the elements, not all zero unless the reference is) and a relative-error norm.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "attnbwd/bf16.hpp"

namespace attnbwd::test {

inline double as_double(float x) { return x; }
inline double as_double(double x) { return x; }
inline double as_double(bf16 x) { return x.to_float(); }

struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
  double match_ratio = 0.99;  // the grader's default (spec §6)
  double max_rel_norm = -1;   // ||got - want||_2 / ||want||_2 bound; < 0: not checked
};

// Checks `n` elements; every non-finite value fails. Returns an assertion result naming `name`.
template <class G, class W>
::testing::AssertionResult close(const std::string& name, const G* got, const W* want, std::int64_t n,
                                 const Tolerance& tol) {
  std::int64_t bad = 0, first_bad = -1, nonfinite = 0;
  double diff2 = 0, ref2 = 0, worst = 0;
  bool got_all_zero = true, want_all_zero = true;
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = as_double(got[i]), w = as_double(want[i]);
    if (!std::isfinite(g) || !std::isfinite(w)) {
      if (nonfinite++ == 0 && first_bad < 0) first_bad = i;
      ++bad;
      continue;
    }
    got_all_zero = got_all_zero && g == 0;
    want_all_zero = want_all_zero && w == 0;
    const double d = std::fabs(g - w);
    diff2 += d * d;
    ref2 += w * w;
    if (d > tol.atol + tol.rtol * std::fabs(w)) {
      if (first_bad < 0) first_bad = i;
      ++bad;
    }
    worst = std::fmax(worst, d);
  }
  const double matched = n ? 1.0 - static_cast<double>(bad) / static_cast<double>(n) : 1.0;
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  std::ostringstream os;
  os << name << ": " << n << " elements, " << bad << " outside atol " << tol.atol << " + rtol " << tol.rtol
     << " (matched " << matched << "), " << nonfinite << " non-finite, max |diff| " << worst
     << ", relative L2 error " << rel;
  if (first_bad >= 0)
    os << "; first bad [" << first_bad << "] got " << as_double(got[first_bad]) << " want "
       << as_double(want[first_bad]);
  if (nonfinite > 0 || matched < tol.match_ratio || (got_all_zero && !want_all_zero) ||
      (tol.max_rel_norm >= 0 && rel > tol.max_rel_norm))
    return ::testing::AssertionFailure() << os.str();
  return ::testing::AssertionSuccess() << os.str();
}

}  // namespace attnbwd::test
