// The portable vision_mha_norm_backward (spec §4, Molmo 001) against the serial oracle, on every
// enabled execution space. Inputs are fresh random draws with the benchmark's distributions
// (tools::generate_inputs, small shapes by overriding the constant axes); outputs are poisoned with
// NaN before each run, so an element the portable path leaves unwritten fails. Every element of
// every output must pass the spec §6 rule (rtol 1e-5, the op's workload atol, 99% matched) and the
// relative L2 error must be <= 1e-5 (issue 3's bound for the fp32 ops). The measured errors are
// recorded as test properties (--gtest_output=xml).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/detail/views.hpp"
#include "serial/serial.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/device_args.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

namespace attnbwd {
namespace {

using Args = VisionMhaArgs;
const std::string kOp = "vision_mha_norm_backward";
constexpr double kRtol = 1e-5, kMaxRelNorm = 1e-5;

// Host arguments over generated inputs, each output in an owned buffer of its definition shape.
struct HostCase {
  HostCase(const tools::TensorSet& in, const tools::Axes& given) {
    const tools::Definition def = tools::load_definition(kOp);
    const tools::Axes axes = def.resolve_axes(given);
    detail::for_each_tensor(args, [&](const char* name, auto& t, bool output) {
      using Elem = std::remove_pointer_t<decltype(t.data)>;
      std::vector<std::int64_t> shape;
      if (output) {
        for (const auto& o : def.outputs)
          if (o.name == name) shape = def.shape_of(o, axes);
      } else {
        shape = in.find(name)->shape;
      }
      t.rank = static_cast<int>(shape.size());
      for (std::size_t i = 0; i < shape.size(); ++i) t.extent[i] = shape[i];
      if constexpr (std::is_const_v<Elem>) {
        t.data = in.find(name)->template data<std::remove_const_t<Elem>>();
      } else {
        outputs.emplace_back(static_cast<std::size_t>(t.size()));
        t.data = outputs.back().data();
      }
    });
    args.scale = tools::scalar(in, "scale");
    args.norm_eps = tools::scalar(in, "norm_eps");
    test::poison_outputs(args);
  }
  HostCase(const HostCase&) = delete;  // args point into outputs
  HostCase& operator=(const HostCase&) = delete;
  Args args;
  std::vector<std::vector<float>> outputs;  // for_each_tensor order
};

struct Output {
  std::string name;
  const float* data;
  std::int64_t size;
};
std::vector<Output> outputs_of(Args a) {
  std::vector<Output> out;
  detail::for_each_tensor(a, [&](const char* name, auto& t, bool output) {
    if constexpr (!std::is_const_v<std::remove_pointer_t<decltype(t.data)>>)
      if (output) out.push_back({name, t.data, t.size()});
  });
  return out;
}

// The oracle's outputs for `in` (host, double accumulation).
struct Oracle {
  Oracle(const tools::TensorSet& in, const tools::Axes& axes) : host(in, axes) {
    serial::vision_mha_norm_backward(validate(host.args), host.args);
  }
  HostCase host;
};

// Runs the portable path on Exec and checks every output against the oracle.
template <class Exec>
void expect_portable_matches(const std::string& label, const tools::TensorSet& in, const tools::Axes& axes,
                             const Oracle& want, double atol) {
  HostCase got(in, axes);
  {
    test::DeviceArgs<Exec, Args> device(got.args);
    Options o;
    o.backend = Backend::Portable;
    EXPECT_EQ(detail::run(Exec(), device.args, o), Backend::Portable);
    Exec().fence();
    device.outputs_to(got.args);
  }
  const auto g = outputs_of(got.args), w = outputs_of(want.host.args);
  ASSERT_EQ(g.size(), 7u);
  ASSERT_EQ(g.size(), w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i].size, w[i].size);
    const auto r = test::close(g[i].name, g[i].data, w[i].data, g[i].size, {atol, kRtol, 0.99, kMaxRelNorm});
    EXPECT_TRUE(r);
    ::testing::Test::RecordProperty(label + " " + g[i].name, r.message());
  }
}

// The tightest atol of the op's workloads, for shapes that are not workloads.
double smallest_atol() {
  double atol = 1e30;
  for (const tools::Workload& w : tools::load_workloads(kOp)) atol = std::min(atol, w.atol);
  return atol;
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
  const double atol = smallest_atol();
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
