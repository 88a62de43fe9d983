// The portable vision_mha_norm_backward (spec §4, Molmo 001) against the serial oracle, on every
// enabled execution space. Inputs are fresh random draws with the benchmark's distributions
// (tools::generate_inputs, small shapes by overriding the constant axes); outputs are poisoned with
// NaN before each run, so an element the portable path leaves unwritten fails. Every element of
// every output must pass the spec §6 rule (rtol 1e-5, the op's workload atol, 99% matched) and the
// relative L2 error must be <= 1e-5 (issue 3's bound for the fp32 ops). The measured errors are
// recorded as test properties (--gtest_output=xml).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/common/host_case.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

namespace attnbwd {
namespace {

using Args = VisionMhaArgs;
const std::string kOp = "vision_mha_norm_backward";
constexpr double kRtol = 1e-5, kMaxRelNorm = 1e-5;

using HostCase = test::HostCase<Args>;
using Oracle = test::Oracle<Args>;

// Runs the portable path on Exec and checks every output against the oracle.
template <class Exec>
void expect_portable_matches(const std::string& label, const tools::TensorSet& in, const tools::Axes& axes,
                             const Oracle& want, double atol) {
  HostCase got(in, axes);
  test::expect_portable_matches<Exec>(
      got, want, 7, [&](std::size_t) { return test::Tolerance{atol, kRtol, 0.99, kMaxRelNorm}; },
      test::record_property(label), label);
}

template <class Exec>
class PortableVisionMhaNorm : public ::testing::Test {};
TYPED_TEST_SUITE(PortableVisionMhaNorm, test::ExecSpaces);

// Sequence lengths below, at and across tile boundaries (1, 7, 65, 131), head dims 64 and 128,
// batch 1 and 3; and a head dim whose tiles exceed the fast scratch (the level-1 fallback).
TYPED_TEST(PortableVisionMhaNorm, SmallShapesWithTails) {
  ATTNBWD_SEED_TRACE();
  struct Shape {
    std::int64_t B, S, H, D;
  };
  const double atol = test::smallest_atol(kOp);
  std::uint64_t tag = 0;
  for (const Shape c : {Shape{1, 1, 2, 64}, Shape{3, 7, 2, 128}, Shape{1, 65, 3, 64}, Shape{3, 65, 1, 128},
                        Shape{1, 131, 2, 128}, Shape{3, 131, 2, 64}, Shape{2, 9, 1, 600}}) {
    const std::string label = "B=" + std::to_string(c.B) + " S=" + std::to_string(c.S) +
                              " H=" + std::to_string(c.H) + " D=" + std::to_string(c.D);
    SCOPED_TRACE(label);
    const tools::Axes axes{{"batch_size", c.B}, {"seq_len", c.S}, {"num_heads", c.H},
                           {"head_dim", c.D},   {"embed_dim", c.H * c.D}};
    const tools::TensorSet in = tools::generate_inputs(kOp, axes, test::fresh_seed(tag++));
    const Oracle want(in, axes);
    expect_portable_matches<TypeParam>(label, in, axes, want, atol);
  }
}

// Benchmark workload #10 (B = 1, S = 577, E = 1024, 16 heads of 64) with its own atol. Inputs and
// the oracle (seconds on the host) are made once and shared by every execution space.
TYPED_TEST(PortableVisionMhaNorm, Workload10) {
  ATTNBWD_SEED_TRACE();
  static const tools::Workload w = tools::find_workload(tools::load_workloads(kOp), "10");
  static const tools::TensorSet in = tools::generate_inputs(kOp, w.axes, test::fresh_seed(100), w.scalars);
  static const Oracle want(in, w.axes);
  expect_portable_matches<TypeParam>("workload " + w.uuid, in, w.axes, want, w.atol);
}

}  // namespace
}  // namespace attnbwd
