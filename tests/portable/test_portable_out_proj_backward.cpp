// The portable out_proj_backward against the serial oracle, on every enabled execution space.
// Inputs are drawn as the benchmark draws them (tools::generate_inputs, fresh seed per run); outputs
// are poisoned (NaN) before each run; every element of both outputs is compared with the spec §6 rule
// plus a relative-L2 bound.
//
// Tolerances. rtol 0.05 and matched ratio 0.99 as the grader; atol: a real workload's own; for the
// small synthetic shapes the smallest atol of the op's workloads (1e-5, workload #8): no workload is
// looser, and small shapes give outputs of the same magnitude (|G| ~ 1, |dW| ~ √T).
// Relative L2: the oracle rounds exact sums and we round fp32 sums, so only the rare elements whose
// fp32 sum lands across a bf16 rounding boundary differ, by one bf16 ulp: worst measured 9.1e-5 over
// 40 seeds × the small shapes, 3.9e-5 on workload #8. kRelL2 = 1e-3 is ~10x that; rounding G by
// truncation instead of to nearest gives 4e-3, a wrong row index 0.1-0.6.
// Exact inputs (small integers): every fp32 sum is exact, so the result must match bit for bit.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common/rng.hpp"
#include "tests/common/host_case.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

namespace attnbwd::test {
namespace {

using std::int64_t;
const std::string kOp = "out_proj_backward";
constexpr double kRelL2 = 1e-3;

using Args = OutProjArgs;

template <class Exec>
class PortableOutProj : public ::testing::Test {};
TYPED_TEST_SUITE(PortableOutProj, ExecSpaces);

// Runs the oracle on the host and the portable path on Exec over inputs `in` (axes `given`), then
// compares every output element.
template <class Exec>
void check(const tools::TensorSet& in, const tools::Axes& given, const Tolerance& tol, bool report) {
  const Oracle<Args> want(in, given);
  HostCase<Args> got(in, given);
  const std::string axes = tools::axes_to_string(got.axes);
  expect_portable_matches<Exec>(got, want, 2, [&](std::size_t) { return tol; }, print_measured<Exec>(axes, report),
                                axes);
}

// Tails (S = 1, 7, 65, 131: not multiples of 64), head_dim 64 and 128, batch > 1, non-square
// heads×dim splits.
TYPED_TEST(PortableOutProj, MatchesOracleOnSmallShapes) {
  ATTNBWD_SEED_TRACE();
  struct Case {
    int64_t B, S, H, D;
  };
  const Case cases[] = {{2, 7, 4, 64}, {1, 65, 2, 128}, {3, 1, 3, 64}, {2, 131, 2, 64}};
  std::uint64_t tag = 0;
  for (const Case& c : cases) {
    const tools::Axes axes{
        {"batch_size", c.B}, {"seq_len", c.S}, {"num_heads", c.H}, {"head_dim", c.D}, {"hidden_size", c.H * c.D}};
    check<TypeParam>(tools::generate_inputs(kOp, axes, fresh_seed(tag++)), axes,
                     Tolerance{smallest_atol(kOp), 0.05, 0.99, kRelL2}, true);
  }
}

// Benchmark workload #8 (B=1, S=256, 32 heads of 64) at its own tolerance.
TYPED_TEST(PortableOutProj, MatchesOracleOnWorkload8) {
  ATTNBWD_SEED_TRACE();
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  const tools::Workload& w = tools::find_workload(all, "8");
  check<TypeParam>(tools::generate_inputs(kOp, w.axes, fresh_seed(100)), w.axes,
                   Tolerance{w.atol, 0.05, 0.99, kRelL2}, true);
}

// Integers in [-15, 15], B=2, S=3, 2 heads of 4: |G| <= 8·15² = 1800, |dW| <= 6·15² = 1350, so every
// fp32 partial sum is an exact integer, while results above 256 need rounding to bf16.
TYPED_TEST(PortableOutProj, MatchesOracleBitForBitOnExactInputs) {
  ATTNBWD_SEED_TRACE();
  // Counted over all rounds: one round alone has all 64 dW values bf16-exact about once in 10^4.
  int64_t rounded = 0;
  for (std::uint64_t round = 0; round < 10; ++round) {
    const int64_t B = 2, S = 3, H = 2, D = 4, F = H * D, T = B * S;
    const tools::Axes axes{{"batch_size", B}, {"seq_len", S}, {"num_heads", H}, {"head_dim", D}, {"hidden_size", F}};
    tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(200 + round));
    Rng rng(fresh_seed(300 + round));
    for (const char* name : {"grad_output", "reshaped", "weight"}) {
      bf16* x = in.find(name)->data<bf16>();
      for (int64_t i = 0; i < in.find(name)->numel(); ++i)
        x[i] = bf16(static_cast<float>(static_cast<int>(rng.uniform() * 31.0) - 15));
    }
    check<TypeParam>(in, axes, Tolerance{0.0, 0.0, 1.0, 0.0}, false);

    // Not vacuous: some exact dW = dYᵀ·X element is not a bf16 value, so rounding was exercised.
    const bf16* dY = in.find("grad_output")->data<bf16>();
    const bf16* X = in.find("reshaped")->data<bf16>();
    for (int64_t i = 0; i < F; ++i)
      for (int64_t j = 0; j < F; ++j) {
        float exact = 0.0f;  // an integer below 2^11: exact
        for (int64_t t = 0; t < T; ++t) exact += dY[t * F + i].to_float() * X[t * F + j].to_float();
        rounded += bf16(exact).to_float() != exact;
      }
  }
  EXPECT_GT(rounded, 0);
}

}  // namespace
}  // namespace attnbwd::test
