// The portable vision_varlen_rope_backward (spec §5, Qwen3-VL 017) against the serial oracle, on
// every enabled execution space. Inputs are fresh random draws with the reference's get_inputs
// distributions (tools::generate_inputs, small shapes by overriding the constant axes, then
// cu_seqlens replaced by the case's sequence lengths); outputs are poisoned with NaN before each
// run, so an element the portable path leaves unwritten fails. Every element of every output must
// pass the spec §6 rule (rtol 1e-5, the op's workload atol, 99% matched) and the relative L2 error
// must be <= 1e-5 (issue 3's bound for the fp32 ops). The measured errors are recorded as test
// properties (--gtest_output=xml).
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

using Args = VisionVarlenArgs;
const std::string kOp = "vision_varlen_rope_backward";
constexpr double kRtol = 1e-5, kMaxRelNorm = 1e-5;

using HostCase = test::HostCase<Args>;
using Oracle = test::Oracle<Args>;

// Runs the portable path on Exec and checks every output against the oracle.
template <class Exec>
void expect_portable_matches(const std::string& label, const tools::TensorSet& in, const tools::Axes& axes,
                             const Oracle& want, double atol, bool host_cu_seqlens = true) {
  HostCase got(in, axes);
  if (!host_cu_seqlens) got.args.cu_seqlens_host = nullptr;
  test::expect_portable_matches<Exec>(
      got, want, 5, [&](std::size_t) { return test::Tolerance{atol, kRtol, 0.99, kMaxRelNorm}; },
      test::record_property(label), label);
}

template <class Exec>
class PortableVisionVarlenRope : public ::testing::Test {};
TYPED_TEST_SUITE(PortableVisionVarlenRope, test::ExecSpaces);

// Inputs for sequences of the given lengths (zeros allowed), hidden size H·D. The qkv weights are
// scaled by `weight_gain` (get_inputs draws 0.02·N(0,1)): 4 makes the softmax rows of the small
// hidden sizes far from uniform (scores of a few units).
tools::TensorSet varlen_inputs(const std::vector<std::int32_t>& lengths, std::int64_t H, std::int64_t D,
                               float weight_gain, std::uint64_t seed, tools::Axes& axes) {
  std::int64_t S = 0;
  for (std::int32_t L : lengths) S += L;
  axes = {{"total_seq_len", S},
          {"num_sequences", static_cast<std::int64_t>(lengths.size())},
          {"num_heads", H},
          {"head_dim", D},
          {"hidden_size", H * D}};
  tools::TensorSet in = tools::generate_inputs(kOp, axes, seed);
  std::int32_t* cu = in.find("cu_seqlens")->data<std::int32_t>();
  cu[0] = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) cu[i + 1] = cu[i] + lengths[i];
  tools::HostTensor& w = *in.find("qkv_weight");
  for (std::int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] *= weight_gain;
  return in;
}

// One sequence; only length-1 sequences; empty sequences first, between and last; lengths 1..130
// mixed across tile boundaries, with head dims 64 and 128; a head dim whose tiles exceed the fast
// scratch (the level-1 fallback; hidden size 600 makes scores large enough at gain 1).
TYPED_TEST(PortableVisionVarlenRope, SequenceMixes) {
  ATTNBWD_SEED_TRACE();
  struct Case {
    std::vector<std::int32_t> lengths;
    std::int64_t H, D;
    float weight_gain;
  };
  const std::vector<Case> cases = {
      {{37}, 2, 64, 4.0f},
      {{1, 1, 1, 1, 1}, 2, 128, 4.0f},
      {{0, 7, 0, 0, 13, 1, 0}, 1, 128, 4.0f},
      {{1, 130, 0, 33, 2, 64, 65, 17, 129}, 1, 128, 4.0f},
      {{31, 1, 96, 0, 130, 3, 47}, 2, 64, 4.0f},
      {{4, 0, 5}, 1, 600, 1.0f},
  };
  const double atol = test::smallest_atol(kOp);
  std::uint64_t tag = 0;
  for (const Case& c : cases) {
    std::string lengths;
    for (std::int32_t L : c.lengths) lengths += std::to_string(L) + " ";
    const std::string label = "lengths " + lengths + "H=" + std::to_string(c.H) + " D=" + std::to_string(c.D);
    SCOPED_TRACE(label);
    tools::Axes axes;
    const tools::TensorSet in = varlen_inputs(c.lengths, c.H, c.D, c.weight_gain, test::fresh_seed(tag++), axes);
    const Oracle want(in, axes);
    expect_portable_matches<TypeParam>(label, in, axes, want, atol);
  }
}

// Without the caller's host copy of cu_seqlens: on a device space dispatch then copies it for
// validation; the kernels read only the device cu_seqlens either way.
TYPED_TEST(PortableVisionVarlenRope, WithoutHostCuSeqlens) {
  ATTNBWD_SEED_TRACE();
  tools::Axes axes;
  const tools::TensorSet in = varlen_inputs({5, 0, 70, 1, 20}, 2, 64, 4.0f, test::fresh_seed(50), axes);
  const Oracle want(in, axes);
  expect_portable_matches<TypeParam>("no host cu_seqlens", in, axes, want, test::smallest_atol(kOp),
                                     /*host_cu_seqlens=*/false);
}

// Benchmark workload #8 (S = 131, one sequence, 28 heads of 128, hidden 3584) with its own atol.
// Inputs and the oracle (seconds on the host) are made once and shared by every execution space.
TYPED_TEST(PortableVisionVarlenRope, Workload8) {
  ATTNBWD_SEED_TRACE();
  static const tools::Workload w = tools::find_workload(tools::load_workloads(kOp), "8");
  static const tools::TensorSet in = tools::generate_inputs(kOp, w.axes, test::fresh_seed(100), w.scalars);
  static const Oracle want(in, w.axes);
  expect_portable_matches<TypeParam>("workload " + w.uuid, in, w.axes, want, w.atol);
}

}  // namespace
}  // namespace attnbwd
