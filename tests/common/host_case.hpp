// Host arguments of one op over a tools::TensorSet's input buffers, with owned, NaN-poisoned output
// buffers of the definition's shapes; the serial oracle and the portable path run on them, and every
// output of one is compared with the other's. Shared by the tests/portable tests of all four ops.
#pragma once

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/args.hpp"
#include "attnbwd/detail/views.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/device_args.hpp"
#include "tools/tensor_set.hpp"
#include "tools/workloads.hpp"

namespace attnbwd::test {

// ---- per-op differences ----------------------------------------------------------------------------

// The op's name (its definition and workloads) and the element type of its outputs.
template <class Args>
struct op_traits;
template <>
struct op_traits<OutProjArgs> {
  static constexpr const char* name = "out_proj_backward";
  using Out = bf16;
};
template <>
struct op_traits<GqaRopeArgs> {
  static constexpr const char* name = "gqa_rope_backward";
  using Out = bf16;
};
template <>
struct op_traits<VisionMhaArgs> {
  static constexpr const char* name = "vision_mha_norm_backward";
  using Out = float;
};
template <>
struct op_traits<VisionVarlenArgs> {
  static constexpr const char* name = "vision_varlen_rope_backward";
  using Out = float;
};

// The non-tensor arguments, read from the set's scalar inputs. (out_proj's head count needs none:
// its grad_attn_output takes num_heads from the axes, as every output shape does.)
inline void set_scalars(OutProjArgs&, const tools::TensorSet&) {}
inline void set_scalars(GqaRopeArgs& a, const tools::TensorSet& in) { a.scaling = tools::scalar(in, "scaling"); }
inline void set_scalars(VisionMhaArgs& a, const tools::TensorSet& in) {
  a.scale = tools::scalar(in, "scale");
  a.norm_eps = tools::scalar(in, "norm_eps");
}
inline void set_scalars(VisionVarlenArgs& a, const tools::TensorSet& in) {
  a.attention_dropout = tools::scalar(in, "attention_dropout");
  a.scaling = tools::scalar(in, "scaling");
  a.cu_seqlens_host = a.cu_seqlens.data;  // host memory here; DeviceArgs keeps this copy
}

// ---- the shared part ---------------------------------------------------------------------------------

// Host arguments over generated inputs `in` (each checked against its definition dtype and shape),
// each output in an owned buffer of its definition shape, poisoned with NaN.
template <class Args>
struct HostCase {
  HostCase(const tools::TensorSet& in, const tools::Axes& given) {
    const tools::Definition def = tools::load_definition(op_traits<Args>::name);
    axes = def.resolve_axes(given);
    const auto shape_of = [&](const std::vector<tools::TensorDef>& list, const char* name) {
      for (const tools::TensorDef& t : list)
        if (t.name == name) return def.shape_of(t, axes);
      throw Error(name, "not in the definition of " + std::string(op_traits<Args>::name));
    };
    detail::for_each_tensor(args, [&](const char* name, auto& t, bool output) {
      using Ptr = std::remove_pointer_t<decltype(t.data)>;
      using Elem = std::remove_const_t<Ptr>;
      const std::vector<std::int64_t> shape = shape_of(output ? def.outputs : def.inputs, name);
      t.rank = static_cast<int>(shape.size());
      for (std::size_t i = 0; i < shape.size(); ++i) t.extent[i] = shape[i];
      if constexpr (std::is_const_v<Ptr>) {
        t.data = tools::expect(in, name, tools::dtype_of<Elem>::value, shape).template data<Elem>();
      } else {
        outputs.emplace_back(static_cast<std::size_t>(t.size()) * sizeof(Elem));
        t.data = reinterpret_cast<Elem*>(outputs.back().data());
      }
    });
    set_scalars(args, in);
    poison_outputs(args);
  }
  HostCase(const HostCase&) = delete;  // args point into outputs
  HostCase& operator=(const HostCase&) = delete;

  tools::Axes axes;  // all axes, resolved
  Args args;
  // for_each_tensor order; bytes from operator new (aligned for any scalar), moved not copied on growth
  std::vector<std::vector<unsigned char>> outputs;
};

// Every output of `a` (for_each_tensor order).
template <class Args>
struct Output {
  std::string name;
  const typename op_traits<Args>::Out* data;
  std::int64_t size;
};
template <class Args>
std::vector<Output<Args>> outputs_of(Args a) {
  std::vector<Output<Args>> out;
  detail::for_each_tensor(a, [&](const char* name, auto& t, bool output) {
    if constexpr (!std::is_const_v<std::remove_pointer_t<decltype(t.data)>>)
      if (output) out.push_back({name, t.data, t.size()});
  });
  return out;
}

// The serial oracle's outputs for `in` (host, exact or double accumulation).
template <class Args>
struct Oracle {
  Oracle(const tools::TensorSet& in, const tools::Axes& axes) : host(in, axes) {
    Options serial;
    serial.backend = Backend::Serial;
    detail::run(Kokkos::DefaultHostExecutionSpace(), host.args, serial);
  }
  HostCase<Args> host;
};

// Runs the portable path on Exec over copies of `got`'s arguments in Exec's memory, checks that the
// portable path ran, and checks every output against `want`: close(tol_of(i)) for output i, whose
// result goes to report(name, result) and then to EXPECT_TRUE (with `context` on failure).
template <class Exec, class Args, class TolOf, class Report>
void expect_portable_matches(HostCase<Args>& got, const Oracle<Args>& want, std::size_t num_outputs,
                             TolOf&& tol_of, Report&& report, const std::string& context) {
  {
    DeviceArgs<Exec, Args> device(got.args);
    Options o;
    o.backend = Backend::Portable;
    EXPECT_EQ(detail::run(Exec(), device.args, o), Backend::Portable);
    Exec().fence();
    device.outputs_to(got.args);
  }
  const auto g = outputs_of(got.args), w = outputs_of(want.host.args);
  ASSERT_EQ(g.size(), num_outputs);
  ASSERT_EQ(g.size(), w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    ASSERT_EQ(g[i].size, w[i].size);
    const Tolerance tol = tol_of(i);
    const auto r = close(g[i].name, g[i].data, w[i].data, g[i].size, tol);
    report(g[i].name, r);
    EXPECT_TRUE(r) << context;
  }
}

// A report for expect_portable_matches: records each result as the test property "<label> <output>"
// (--gtest_output=xml).
inline auto record_property(const std::string& label) {
  return [label](const std::string& name, const ::testing::AssertionResult& r) {
    ::testing::Test::RecordProperty(label + " " + name, r.message());
  };
}

// A report for expect_portable_matches: when `on`, prints "[ measured ] <Exec> <axes>: <result>".
template <class Exec>
auto print_measured(const std::string& axes, bool on) {
  return [axes, on](const std::string&, const ::testing::AssertionResult& r) {
    if (on) std::printf("[ measured ] %s %s: %s\n", Exec::name(), axes.c_str(), r.message());
  };
}

// The tightest atol of the op's workloads, for shapes that are not workloads.
inline double smallest_atol(const std::string& op) {
  double atol = 1e30;
  for (const tools::Workload& w : tools::load_workloads(op)) atol = std::min(atol, w.atol);
  return atol;
}

}  // namespace attnbwd::test
