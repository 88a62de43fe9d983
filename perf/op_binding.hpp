// One op, bound to its inputs and outputs in an execution space's memory: generated host tensors
// are copied there once (no copy when it is host memory), outputs are allocated once, and the
// returned callable runs the op on `exec` with the given Options (asynchronously where the backend
// allows: the caller's clock fences or records events around it).
#pragma once

#include <Kokkos_Core.hpp>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>

#include "attnbwd/attnbwd.hpp"
#include "tools/tensor_set.hpp"
#include "tools/workloads.hpp"

namespace attnbwd::perf {

using OpCall = std::function<void(const Options&)>;

namespace binding {

using tools::DType;
using tools::HostTensor;
using tools::TensorSet;

template <class DataType, class Mem>
using View = detail::View<DataType, Mem>;

template <class DataType>
using HostView = Kokkos::View<DataType, Kokkos::LayoutRight, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

// A View of `DataType` (e.g. `bf16***`) with the tensor's extents, allocated or wrapping `data`.
template <class V, class P>
V shaped(P data_or_label, const std::vector<std::int64_t>& s) {
  const auto e = [&](std::size_t i) { return static_cast<std::size_t>(s.at(i)); };
  if constexpr (V::rank == 1) return V(data_or_label, e(0));
  else if constexpr (V::rank == 2) return V(data_or_label, e(0), e(1));
  else if constexpr (V::rank == 3) return V(data_or_label, e(0), e(1), e(2));
  else return V(data_or_label, e(0), e(1), e(2), e(3));
}

// The named input in memory `Mem`, as a const View. The TensorSet must outlive it in host builds,
// where the View aliases the tensor's bytes.
template <class Elem, class DataType, class Mem>
View<DataType, Mem> input(const TensorSet& in, const char* name) {
  const HostTensor* t = in.find(name);
  if (t == nullptr) throw Error(name, "input missing from the generated set");
  using Plain = typename View<DataType, Mem>::non_const_data_type;
  const auto host = shaped<HostView<Plain>>(const_cast<Elem*>(t->data<Elem>()), t->shape);
  return Kokkos::create_mirror_view_and_copy(Mem(), host);
}

template <class DataType, class Mem>
View<DataType, Mem> output(const char* name, const std::vector<std::int64_t>& shape) {
  return shaped<View<DataType, Mem>>(std::string(name), shape);
}

inline const std::vector<std::int64_t>& shape_of(const TensorSet& in, const char* name) {
  const HostTensor* t = in.find(name);
  if (t == nullptr) throw Error(name, "input missing from the generated set");
  return t->shape;
}

}  // namespace binding

// Binds `op` on `exec` to the generated inputs `in` (kept alive by the callable); `axes` are the
// workload's resolved axes (they give what the inputs' shapes do not, e.g. 004's head split).
template <class Exec>
OpCall bind_op(const Exec& exec, const std::string& op, const tools::Axes& axes,
               std::shared_ptr<const tools::TensorSet> in) {
  using Mem = typename Exec::memory_space;
  using namespace binding;
  const TensorSet& s = *in;
  auto dims = [&](const char* name) { return shape_of(s, name); };

  if (op == "out_proj_backward") {
    const auto dy = dims("grad_output");  // [B,S,H·D]
    const std::int64_t B = dy[0], S = dy[1], hidden = dy[2];
    const std::int64_t heads = axes.at("num_heads"), head_dim = axes.at("head_dim");
    OutProjInputs<Mem> i{input<bf16, const bf16***, Mem>(s, "grad_output"),
                         input<bf16, const bf16***, Mem>(s, "reshaped"),
                         input<bf16, const bf16**, Mem>(s, "weight")};
    OutProjOutputs<Mem> o{output<bf16****, Mem>("grad_attn_output", {B, heads, S, head_dim}),
                          output<bf16**, Mem>("grad_weight", {hidden, hidden})};
    return [exec, i, o, in](const Options& opts) { out_proj_backward(exec, i, o, opts); };
  }
  if (op == "gqa_rope_backward") {
    GqaRopeInputs<Mem> i;
    i.grad_output = input<bf16, const bf16***, Mem>(s, "grad_output");
    i.hidden_states = input<bf16, const bf16***, Mem>(s, "hidden_states");
    i.cos = input<bf16, const bf16***, Mem>(s, "cos");
    i.sin = input<bf16, const bf16***, Mem>(s, "sin");
    i.q_weight = input<bf16, const bf16**, Mem>(s, "q_weight");
    i.k_weight = input<bf16, const bf16**, Mem>(s, "k_weight");
    i.v_weight = input<bf16, const bf16**, Mem>(s, "v_weight");
    i.o_weight = input<bf16, const bf16**, Mem>(s, "o_weight");
    i.query_states = input<bf16, const bf16****, Mem>(s, "query_states");
    i.key_states = input<bf16, const bf16****, Mem>(s, "key_states");
    i.value_states = input<bf16, const bf16****, Mem>(s, "value_states");
    i.attn_weights = input<bf16, const bf16****, Mem>(s, "attn_weights");
    i.attn_output = input<bf16, const bf16***, Mem>(s, "attn_output");
    i.scaling = tools::scalar(s, "scaling");
    GqaRopeOutputs<Mem> o;
    o.grad_hidden_states = output<bf16***, Mem>("grad_hidden_states", dims("hidden_states"));
    o.grad_q_weight = output<bf16**, Mem>("grad_q_weight", dims("q_weight"));
    o.grad_k_weight = output<bf16**, Mem>("grad_k_weight", dims("k_weight"));
    o.grad_v_weight = output<bf16**, Mem>("grad_v_weight", dims("v_weight"));
    o.grad_o_weight = output<bf16**, Mem>("grad_o_weight", dims("o_weight"));
    return [exec, i, o, in](const Options& opts) { gqa_rope_backward(exec, i, o, opts); };
  }
  if (op == "vision_mha_norm_backward") {
    VisionMhaInputs<Mem> i;
    i.grad_output = input<float, const float***, Mem>(s, "grad_output");
    i.x = input<float, const float***, Mem>(s, "x");
    i.x_mean = input<float, const float***, Mem>(s, "x_mean");
    i.x_var = input<float, const float***, Mem>(s, "x_var");
    i.x_norm = input<float, const float***, Mem>(s, "x_norm");
    i.ln_weight = input<float, const float*, Mem>(s, "ln_weight");
    i.qkv_weight = input<float, const float**, Mem>(s, "qkv_weight");
    i.q = input<float, const float****, Mem>(s, "q");
    i.k = input<float, const float****, Mem>(s, "k");
    i.v = input<float, const float****, Mem>(s, "v");
    i.attn_weights = input<float, const float****, Mem>(s, "attn_weights");
    i.attn_output = input<float, const float***, Mem>(s, "attn_output");
    i.out_weight = input<float, const float**, Mem>(s, "out_weight");
    i.scale = tools::scalar(s, "scale");
    i.norm_eps = tools::scalar(s, "norm_eps");
    const std::int64_t E = dims("ln_weight")[0];
    VisionMhaOutputs<Mem> o;
    o.grad_x = output<float***, Mem>("grad_x", dims("x"));
    o.grad_qkv_weight = output<float**, Mem>("grad_qkv_weight", dims("qkv_weight"));
    o.grad_qkv_bias = output<float*, Mem>("grad_qkv_bias", {3 * E});
    o.grad_out_weight = output<float**, Mem>("grad_out_weight", dims("out_weight"));
    o.grad_out_bias = output<float*, Mem>("grad_out_bias", {E});
    o.grad_ln_weight = output<float*, Mem>("grad_ln_weight", {E});
    o.grad_ln_bias = output<float*, Mem>("grad_ln_bias", {E});
    return [exec, i, o, in](const Options& opts) { vision_mha_norm_backward(exec, i, o, opts); };
  }
  if (op == "vision_varlen_rope_backward") {
    VisionVarlenInputs<Mem> i;
    i.grad_output = input<float, const float**, Mem>(s, "grad_output");
    i.hidden_states = input<float, const float**, Mem>(s, "hidden_states");
    i.qkv_weight = input<float, const float**, Mem>(s, "qkv_weight");
    i.qkv_bias = input<float, const float*, Mem>(s, "qkv_bias");
    i.proj_weight = input<float, const float**, Mem>(s, "proj_weight");
    i.proj_bias = input<float, const float*, Mem>(s, "proj_bias");
    i.cos = input<float, const float**, Mem>(s, "cos");
    i.sin = input<float, const float**, Mem>(s, "sin");
    i.cu_seqlens = input<std::int32_t, const std::int32_t*, Mem>(s, "cu_seqlens");
    // No cu_seqlens_host: like the harness, the call gets cu_seqlens in the op's memory only, so a
    // device build pays the device->host copy inside the timed call.
    i.attention_dropout = tools::scalar(s, "attention_dropout");
    i.scaling = tools::scalar(s, "scaling");
    VisionVarlenOutputs<Mem> o;
    o.grad_hidden_states = output<float**, Mem>("grad_hidden_states", dims("hidden_states"));
    o.grad_qkv_weight = output<float**, Mem>("grad_qkv_weight", dims("qkv_weight"));
    o.grad_qkv_bias = output<float*, Mem>("grad_qkv_bias", dims("qkv_bias"));
    o.grad_proj_weight = output<float**, Mem>("grad_proj_weight", dims("proj_weight"));
    o.grad_proj_bias = output<float*, Mem>("grad_proj_bias", dims("proj_bias"));
    return [exec, i, o, in](const Options& opts) { vision_varlen_rope_backward(exec, i, o, opts); };
  }
  throw Error("op", "unknown op \"" + op + "\"");
}

}  // namespace attnbwd::perf
