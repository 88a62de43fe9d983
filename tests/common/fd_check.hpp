// Helpers of the serial-oracle tests that check gradients against a float64 forward: random draws,
// element-wise comparison naming the worst element, and central finite differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/rng.hpp"

namespace attnbwd::test {

using Floats = std::vector<float>;
using Vec = std::vector<double>;

inline std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

// `n` draws of scale·N(0, 1), rounded to float.
inline Floats normals(Rng& rng, std::int64_t n, double scale = 1.0) {
  Floats v(sz(n));
  for (float& x : v) x = static_cast<float>(scale * rng.normal());
  return v;
}

// Every element within atol + rtol·|want| (NaN fails); names the worst element.
template <class T>
::testing::AssertionResult all_close(const std::vector<T>& got, const Vec& want, double rtol, double atol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  std::size_t bad = 0, worst = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]), tol = atol + rtol * std::abs(want[i]);
    if (err <= tol) continue;
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (bad++ == 0 || ratio > worst_ratio) worst = i, worst_ratio = ratio;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements off; worst [" << worst
                                       << "] got " << double(got[worst]) << " want " << want[worst]
                                       << " (error " << worst_ratio << "x tolerance)";
}

inline double max_abs(const Vec& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// <a, b> in double.
template <class T>
double dot(const Vec& a, const std::vector<T>& b) {
  double acc = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) acc += a[i] * b[i];
  return acc;
}

// Central differences of `loss` w.r.t. every element of `param` (perturbed in place, then
// restored).
template <class Loss>
Vec central_differences(Vec& param, const Loss& loss, double h = 1e-4) {
  Vec g(param.size());
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double saved = param[i];
    param[i] = saved + h;
    const double up = loss();
    param[i] = saved - h;
    const double down = loss();
    param[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

}  // namespace attnbwd::test
