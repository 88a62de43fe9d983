// The portable gqa_rope_backward against the serial oracle, on every enabled execution space.
// Outputs are poisoned (NaN) before each run and every element of all five outputs is compared.
//
// Random inputs (tools::generate_inputs: the benchmark's distributions, fresh seed per run, constant
// axes overridden for small shapes): the spec §6 rule (rtol 0.05, matched ratio 0.99; atol a real
// workload's own, for the small shapes the smallest of the op's workloads, 0.039: no workload is
// looser) plus a relative-L2 bound per output. The oracle sums exactly, we sum in fp32, so outputs
// differ where an fp32 sum lands across a bf16 rounding boundary (by one ulp), and later steps
// propagate such flips. Worst relative L2 measured over 30 seeds × the small shapes and on workload
// #11 (4 seeds): hidden 1.3e-3, q 7.8e-4, k 1.4e-3, v 3.4e-4, o 8.6e-5; kMaxRelL2 is ~10x those. A wrong
// index (KV head of a query head, RoPE partner) breaks them by orders of magnitude.
//
// A missing or extra intermediate rounding moves outputs by about as much as those flips, so no
// tolerance on random inputs can see it. The exact-inputs test can: on its inputs every fp32 sum is
// exact, so the portable path must match the oracle bit for bit.
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
const std::string kOp = "gqa_rope_backward";

using Args = GqaRopeArgs;

// Per output, in for_each_tensor order: grad_hidden_states, grad_{q,k,v,o}_weight.
constexpr double kMaxRelL2[5] = {1e-2, 1e-2, 1e-2, 3e-3, 1e-3};
constexpr double kExact[5] = {0, 0, 0, 0, 0};

template <class Exec>
class PortableGqaRope : public ::testing::Test {};
TYPED_TEST_SUITE(PortableGqaRope, ExecSpaces);

// Runs the oracle on the host and the portable path on Exec over inputs `in` (axes `given`), then
// compares every output element: |got - want| <= atol + rtol·|want| for a share `match` of them,
// relative L2 <= max_rel_l2[output].
template <class Exec>
void check(const tools::TensorSet& in, const tools::Axes& given, double atol, double rtol, double match,
           const double (&max_rel_l2)[5], bool report) {
  const Oracle<Args> want(in, given);
  HostCase<Args> got(in, given);
  const std::string axes = tools::axes_to_string(got.axes);
  expect_portable_matches<Exec>(
      got, want, 5, [&](std::size_t i) { return Tolerance{atol, rtol, match, max_rel_l2[i]}; },
      print_measured<Exec>(axes, report), axes);
}

// Tails (S = 1, 7, 33, 65, 131), GQA ratios 1, 2, 4, 8, head_dim 64 and 128, batch > 1.
TYPED_TEST(PortableGqaRope, MatchesOracleOnSmallShapes) {
  ATTNBWD_SEED_TRACE();
  struct Case {
    int64_t B, S, Hq, Hkv, D, hidden;
  };
  const Case cases[] = {{2, 7, 4, 4, 64, 96},   {1, 65, 4, 2, 128, 64},  {3, 1, 8, 2, 64, 32},
                        {1, 131, 8, 1, 64, 64}, {2, 33, 4, 1, 128, 128}};
  std::uint64_t tag = 0;
  for (const Case& c : cases) {
    const tools::Axes axes{{"batch_size", c.B},
                           {"seq_len", c.S},
                           {"num_attention_heads", c.Hq},
                           {"num_key_value_heads", c.Hkv},
                           {"head_dim", c.D},
                           {"hidden_size", c.hidden}};
    check<TypeParam>(tools::generate_inputs(kOp, axes, fresh_seed(tag++), tools::default_scalars(kOp)), axes,
                     smallest_atol(kOp), 0.05, 0.99, kMaxRelL2, true);
  }
}

// Benchmark workload #11 (B=1, S=128, the real 5120 / 32 / 8 / 128 shape) at its own tolerance.
TYPED_TEST(PortableGqaRope, MatchesOracleOnWorkload11) {
  ATTNBWD_SEED_TRACE();
  const std::vector<tools::Workload> all = tools::load_workloads(kOp);
  const tools::Workload& w = tools::find_workload(all, "11");
  check<TypeParam>(tools::generate_inputs(kOp, w.axes, fresh_seed(100), w.scalars), w.axes, w.atol, 0.05, 0.99,
                   kMaxRelL2, true);
}

// Replaces input `name` with values drawn uniformly from `values`.
void draw(tools::TensorSet& in, const char* name, Rng& rng, const std::vector<float>& values) {
  tools::HostTensor& t = *in.find(name);
  bf16* x = t.data<bf16>();
  for (int64_t i = 0; i < t.numel(); ++i)
    x[i] = bf16(values[static_cast<std::size_t>(rng.uniform() * static_cast<double>(values.size()))]);
}

// Inputs on which every fp32 sum of the portable path is exact, while every rounding point still
// rounds (its values need more than bf16's 8 bits). B=2, S=2, Hq=4, Hkv=2, D=2, hidden=2, scaling
// 0.75; dY, Wo, A integers in [-15, 15]; P in {0, 1/4, .., 1}; cos, sin in {0, ±1/2, ±3/4}; the rest
// in {-1, 0, 1}. Bounds, with the quantum q each value is a multiple of: |dA| <= 450 (q 1),
// |dP| <= 900 (q 1), |r| <= 1800 and |dP - r| <= 2700 (q 1/4), |dS| <= 2025 (q 1/64), |dQ| <= 4050,
// |dK| <= 8100 (q 1/64), RoPE outputs <= 1.5·|dK| = 12150 (q 1/256); projection sums <= 48600 at
// q 1/256: 1.24e7 quanta < 2^24 (with room for the few 2^-8 growths of rounding up), so fp32 holds
// every partial sum in any order, and fp32 element-wise steps are the oracle's own.
TYPED_TEST(PortableGqaRope, MatchesOracleBitForBitOnExactInputs) {
  ATTNBWD_SEED_TRACE();
  std::vector<float> ints, ones{-1, 0, 1}, quarters{0, 0.25f, 0.5f, 0.75f, 1}, tables{-0.75f, -0.5f, 0, 0.5f, 0.75f};
  for (int v = -15; v <= 15; ++v) ints.push_back(static_cast<float>(v));
  for (std::uint64_t round = 0; round < 20; ++round) {
    const tools::Axes axes{{"batch_size", 2},
                           {"seq_len", 2},
                           {"num_attention_heads", 4},
                           {"num_key_value_heads", 2},
                           {"head_dim", 2},
                           {"hidden_size", 2}};
    tools::TensorSet in = tools::generate_inputs(kOp, axes, fresh_seed(200 + round), {{"scaling", 0.75}});
    Rng rng(fresh_seed(300 + round));
    for (const char* name : {"grad_output", "o_weight", "attn_output"}) draw(in, name, rng, ints);
    for (const char* name : {"hidden_states", "q_weight", "k_weight", "v_weight", "query_states", "key_states",
                             "value_states"})
      draw(in, name, rng, ones);
    draw(in, "attn_weights", rng, quarters);
    for (const char* name : {"cos", "sin"}) draw(in, name, rng, tables);
    check<TypeParam>(in, axes, 0.0, 0.0, 1.0, kExact, false);
  }
}

}  // namespace
}  // namespace attnbwd::test
