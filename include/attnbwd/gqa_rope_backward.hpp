// gqa_rope_backward — Mistral-style attention block backward (spec §3), bf16: o/q/k/v projection
// gradients, attention backward from the given P, GQA reduction, rotate-half RoPE backward, with the
// reference's bf16 rounding points.
#pragma once

#include "attnbwd/bf16.hpp"
#include "attnbwd/detail/views.hpp"
#include "attnbwd/error.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd {

template <class MemorySpace>
struct GqaRopeInputs {
  detail::View<const bf16***, MemorySpace> grad_output;     // [B,S,hidden]  dY
  detail::View<const bf16***, MemorySpace> hidden_states;   // [B,S,hidden]  Xh
  detail::View<const bf16***, MemorySpace> cos;             // [B,S,D]
  detail::View<const bf16***, MemorySpace> sin;             // [B,S,D]
  detail::View<const bf16**, MemorySpace> q_weight;         // [Hq·D,hidden]
  detail::View<const bf16**, MemorySpace> k_weight;         // [Hkv·D,hidden]; gives Hkv
  detail::View<const bf16**, MemorySpace> v_weight;         // [Hkv·D,hidden]
  detail::View<const bf16**, MemorySpace> o_weight;         // [hidden,Hq·D]
  detail::View<const bf16****, MemorySpace> query_states;   // [B,Hq,S,D] after RoPE
  detail::View<const bf16****, MemorySpace> key_states;     // [B,Hq,S,D] after RoPE, repeat_kv
  detail::View<const bf16****, MemorySpace> value_states;   // [B,Hq,S,D] after repeat_kv
  detail::View<const bf16****, MemorySpace> attn_weights;   // [B,Hq,S,S] P
  detail::View<const bf16***, MemorySpace> attn_output;     // [B,S,Hq·D]
  double scaling = 0.0;                                      // used as float
};

template <class MemorySpace>
struct GqaRopeOutputs {
  detail::View<bf16***, MemorySpace> grad_hidden_states;  // [B,S,hidden]
  detail::View<bf16**, MemorySpace> grad_q_weight;        // [Hq·D,hidden]
  detail::View<bf16**, MemorySpace> grad_k_weight;        // [Hkv·D,hidden]
  detail::View<bf16**, MemorySpace> grad_v_weight;        // [Hkv·D,hidden]
  detail::View<bf16**, MemorySpace> grad_o_weight;        // [hidden,Hq·D]
};

template <class MemorySpace>
GqaRopeArgs make_args(const GqaRopeInputs<MemorySpace>& in, const GqaRopeOutputs<MemorySpace>& out) {
  GqaRopeArgs a;
  a.memory = detail::memory_of<MemorySpace>();
  a.grad_output = detail::tensor<3>(in.grad_output);
  a.hidden_states = detail::tensor<3>(in.hidden_states);
  a.cos = detail::tensor<3>(in.cos);
  a.sin = detail::tensor<3>(in.sin);
  a.q_weight = detail::tensor<2>(in.q_weight);
  a.k_weight = detail::tensor<2>(in.k_weight);
  a.v_weight = detail::tensor<2>(in.v_weight);
  a.o_weight = detail::tensor<2>(in.o_weight);
  a.query_states = detail::tensor<4>(in.query_states);
  a.key_states = detail::tensor<4>(in.key_states);
  a.value_states = detail::tensor<4>(in.value_states);
  a.attn_weights = detail::tensor<4>(in.attn_weights);
  a.attn_output = detail::tensor<3>(in.attn_output);
  a.scaling = in.scaling;
  a.grad_hidden_states = detail::tensor<3>(out.grad_hidden_states);
  a.grad_q_weight = detail::tensor<2>(out.grad_q_weight);
  a.grad_k_weight = detail::tensor<2>(out.grad_k_weight);
  a.grad_v_weight = detail::tensor<2>(out.grad_v_weight);
  a.grad_o_weight = detail::tensor<2>(out.grad_o_weight);
  return a;
}

// Runs on `exec` and returns the backend that ran; fence `exec` before reading outputs.
// Throws attnbwd::Error before any write.
template <class ExecSpace>
Backend gqa_rope_backward(const ExecSpace& exec,
                       const GqaRopeInputs<typename ExecSpace::memory_space>& in,
                       const GqaRopeOutputs<typename ExecSpace::memory_space>& out,
                       const Options& opts = {}) {
  return detail::run(exec, make_args(in, out), opts);
}

}  // namespace attnbwd
