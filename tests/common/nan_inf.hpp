// The NaN/Inf input scenarios of the reliability tests, shared by the host backends' test
// (tests/reliability/test_backend_invariants.cpp) and the CUDA fast path's (tests/cuda/test_cuda_nan_inf.cpp),
// and the NaN mask of an op's outputs that the first scenario compares between backends.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "args_visit.hpp"
#include "common/rng.hpp"

namespace attnbwd::test {

// Sets element i of the float input `name` to v.
using Poke = std::function<void(const std::string& name, std::int64_t i, float v)>;

struct NanInfScenario {
  std::string name;
  std::function<void(const Poke&, Rng&)> apply;
};

// `inputs`: the op's bf16/fp32 tensor inputs (name, element count), grad_output among them; `nan_at`:
// the element of grad_output that the first two scenarios poison.
inline std::vector<NanInfScenario> nan_inf_scenarios(const std::vector<std::pair<std::string, std::int64_t>>& inputs,
                                                     std::int64_t nan_at) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  return {
      {"one NaN in grad_output", [=](const Poke& poke, Rng&) { poke("grad_output", nan_at, nan); }},
      {"+Inf in grad_output, -Inf in every other input",
       [=](const Poke& poke, Rng& r) {
         poke("grad_output", nan_at, inf);
         for (const auto& [n, size] : inputs)
           if (n != "grad_output") poke(n, static_cast<std::int64_t>(r.next() % static_cast<std::uint64_t>(size)), -inf);
       }},
      {"every input element NaN",
       [=](const Poke& poke, Rng&) {
         for (const auto& [n, size] : inputs)
           for (std::int64_t i = 0; i < size; ++i) poke(n, i, nan);
       }},
      {"NaN, +Inf, -Inf sprinkled over 5% of every input",
       [=](const Poke& poke, Rng& r) {
         for (const auto& [n, size] : inputs)
           for (std::int64_t i = 0; i < size; ++i)
             if (r.uniform() < 0.05) poke(n, i, r.uniform() < 0.34 ? nan : r.uniform() < 0.5 ? inf : -inf);
       }},
      {"huge finite inputs (±3e38)",
       [=](const Poke& poke, Rng& r) {
         for (const auto& [n, size] : inputs)
           for (std::int64_t i = 0; i < size; ++i) poke(n, i, r.uniform() < 0.5 ? 3e38f : -3e38f);
       }},
  };
}

// isnan of every element of every output of `a` (for_each_tensor order).
template <class Args>
std::vector<bool> nan_mask(Args a) {
  std::vector<bool> m;
  detail::for_each_tensor(a, [&](const char*, auto& t, bool output) {
    if (!output) return;
    for (std::int64_t i = 0; i < t.size(); ++i) m.push_back(std::isnan(static_cast<float>(t.data[i])));
  });
  return m;
}

}  // namespace attnbwd::test
