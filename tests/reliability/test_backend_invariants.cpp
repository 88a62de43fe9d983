// Invariants of every op on every backend available on the host (the serial oracle and the portable
// path, each on Kokkos::DefaultHostExecutionSpace and, when it is another space, Kokkos::Serial):
//   * inputs are never modified (every input byte compared before and after), and the same inputs
//     give the same outputs when run again;
//   * determinism: 100 reruns on a small shape give bit-identical outputs, with Options{} and with
//     {Strict, deterministic}; outputs are refilled with a different pattern (NaN, zeros, 0xA5, 0x7F)
//     before each rerun, so an element a backend forgot to write shows up as a difference too;
//   * NaN / Inf inputs never crash or hang: one NaN in grad_output propagates to a NaN in some output
//     (and to the same output elements on the oracle and the portable path); ±Inf, every input NaN,
//     NaN/Inf sprinkled everywhere and huge finite values all return.
// Shapes (tests/reliability/cases.hpp, small()) span several teams and tiles, with tails.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/nan_inf.hpp"
#include "tests/common/seed.hpp"
#include "tests/reliability/cases.hpp"

namespace attnbwd::test::rel {
namespace {

// One backend on one host execution space.
template <class Args>
struct Target {
  std::string name;
  std::function<void(const Args&, Options)> run;
};

template <class Args>
std::vector<Target<Args>> host_targets() {
  std::vector<Target<Args>> t;
  for (Backend b : {Backend::Serial, Backend::Portable}) {
    const std::string bn = to_string(b);
    t.push_back({bn + " on " + Kokkos::DefaultHostExecutionSpace::name(), [b](const Args& a, Options o) {
                   o.backend = b;
                   detail::run(Kokkos::DefaultHostExecutionSpace(), a, o);
                 }});
#if defined(KOKKOS_ENABLE_SERIAL)
    if (!std::is_same_v<Kokkos::DefaultHostExecutionSpace, Kokkos::Serial>)
      t.push_back({bn + " on Serial", [b](const Args& a, Options o) {
                     o.backend = b;
                     detail::run(Kokkos::Serial(), a, o);
                   }});
#endif
  }
  return t;
}

std::vector<std::pair<std::string, Options>> option_sets() {
  Options strict;
  strict.precision = Precision::Strict;
  strict.deterministic = true;
  return {{"Options{}", Options{}}, {"Strict+deterministic", strict}};
}

// Where two output byte strings first differ: "output name, element i".
std::string first_output_diff(const Arena& arena, const std::vector<unsigned char>& a,
                              const std::vector<unsigned char>& b, std::size_t elem) {
  std::size_t off = 0;
  for (const auto& r : arena.regions()) {
    if (!r.output) continue;
    for (std::size_t k = 0; k < r.bytes; ++k)
      if (a[off + k] != b[off + k]) return r.name + " element " + std::to_string(k / elem);
    off += r.bytes;
  }
  return "none";
}

template <class Args>
constexpr std::size_t elem_size() {
  return std::is_same_v<Args, OutProjArgs> || std::is_same_v<Args, GqaRopeArgs> ? 2 : 4;
}

template <class Params>
class Invariants : public ::testing::Test {};
using AllParams = ::testing::Types<OutProjParams, GqaParams, MhaParams, VarlenParams>;
TYPED_TEST_SUITE(Invariants, AllParams);

TYPED_TEST(Invariants, InputsNeverModifiedAndRerunsAgree) {
  ATTNBWD_SEED_TRACE();
  using Args = typename Case<TypeParam>::Args;
  for (const auto& target : host_targets<Args>())
    for (const auto& [oname, opts] : option_sets()) {
      SCOPED_TRACE(target.name + ", " + oname);
      Case<TypeParam> c(small(TypeParam{}), fresh_seed(301));
      const auto before = c.arena.snapshot();
      target.run(c.args, opts);
      const std::size_t changed = c.arena.first_change(before, Arena::Scope::Inputs);
      EXPECT_EQ(changed, SIZE_MAX) << "input modified: " << c.arena.where(changed);
      const auto first = c.arena.outputs();
      c.arena.fill_outputs(0xFF);
      target.run(c.args, opts);
      EXPECT_EQ(c.arena.first_change(before, Arena::Scope::Inputs), SIZE_MAX) << "input modified on the second run";
      EXPECT_TRUE(c.arena.outputs() == first)
          << "second run differs at " << first_output_diff(c.arena, first, c.arena.outputs(), elem_size<Args>());
    }
}

TYPED_TEST(Invariants, HundredRerunsAreBitIdentical) {
  ATTNBWD_SEED_TRACE();
  using Args = typename Case<TypeParam>::Args;
  constexpr int kReruns = 100;
  const unsigned char fills[] = {0xFF, 0x00, 0xA5, 0x7F};
  int runs = 0;
  for (const auto& target : host_targets<Args>())
    for (const auto& [oname, opts] : option_sets()) {
      SCOPED_TRACE(target.name + ", " + oname);
      Case<TypeParam> c(small(TypeParam{}), fresh_seed(302));
      target.run(c.args, opts);
      const auto ref = c.arena.outputs();
      for (int i = 0; i < kReruns; ++i, ++runs) {
        c.arena.fill_outputs(fills[i % 4]);
        target.run(c.args, opts);
        const auto now = c.arena.outputs();
        if (now != ref) {
          ADD_FAILURE() << "rerun " << i << " differs from the first run at "
                        << first_output_diff(c.arena, ref, now, elem_size<Args>());
          break;
        }
      }
    }
  ::testing::Test::RecordProperty("reruns", runs);
}

// ---- NaN / Inf ------------------------------------------------------------------------------------

// Sets element i of input `name` to v (bf16 or float inputs; others untouched).
template <class Args>
void poke(Args& a, const std::string& name, std::int64_t i, float v) {
  detail::for_each_tensor(a, [&](const char* n, auto& t, bool output) {
    using T = Elem<decltype(t.data)>;
    if (output || name != n) return;
    auto* p = const_cast<T*>(t.data);
    if constexpr (std::is_same_v<T, bf16>) p[i] = bf16(v);
    else if constexpr (std::is_same_v<T, float>) p[i] = v;
  });
}

template <class Args>
std::vector<std::pair<std::string, std::int64_t>> float_inputs(Args a) {
  std::vector<std::pair<std::string, std::int64_t>> v;
  detail::for_each_tensor(a, [&](const char* n, auto& t, bool output) {
    using T = Elem<decltype(t.data)>;
    if (!output && !std::is_same_v<T, std::int32_t>) v.push_back({n, t.size()});
  });
  return v;
}

TYPED_TEST(Invariants, NanAndInfInputsReturnAndPropagate) {
  ATTNBWD_SEED_TRACE();
  using Args = typename Case<TypeParam>::Args;
  Rng rng(fresh_seed(303));
  const auto inputs = float_inputs(make_args(small(TypeParam{})));
  const std::int64_t go_size = inputs.front().second;  // grad_output comes first in every op
  ASSERT_EQ(inputs.front().first, "grad_output");
  const std::int64_t nan_at = static_cast<std::int64_t>(rng.next() % static_cast<std::uint64_t>(go_size));

  const std::vector<NanInfScenario> scenarios = nan_inf_scenarios(inputs, nan_at);
  for (std::size_t s = 0; s < scenarios.size(); ++s) {
    SCOPED_TRACE(scenarios[s].name);
    std::vector<std::vector<bool>> masks;
    std::vector<std::string> names;
    for (const auto& target : host_targets<Args>()) {
      SCOPED_TRACE(target.name);
      Case<TypeParam> c(small(TypeParam{}), fresh_seed(304));
      Rng r(fresh_seed(305 + s));
      scenarios[s].apply([&](const std::string& n, std::int64_t i, float v) { poke(c.args, n, i, v); }, r);
      EXPECT_NO_THROW(target.run(c.args, Options{}));
      if (s == 0) {
        masks.push_back(nan_mask(c.args));
        names.push_back(target.name);
        std::int64_t nans = 0;
        for (bool b : masks.back()) nans += b;
        EXPECT_GT(nans, 0) << "a NaN in grad_output vanished";
      }
    }
    for (std::size_t k = 1; k < masks.size(); ++k)
      EXPECT_TRUE(masks[k] == masks[0]) << names[k] << " puts NaN in other output elements than " << names[0];
  }
}

}  // namespace
}  // namespace attnbwd::test::rel
