// Visits every tensor of an operation's arguments: f(name, Tensor<T>&, is_output).
// One list per op, in the spec's order, so generic code (staging copies, checks) need not repeat it.
#pragma once

#include "attnbwd/args.hpp"

namespace attnbwd::detail {

template <class F>
void for_each_tensor(OutProjArgs& a, F&& f) {
  f("grad_output", a.grad_output, false);
  f("reshaped", a.reshaped, false);
  f("weight", a.weight, false);
  f("grad_attn_output", a.grad_attn_output, true);
  f("grad_weight", a.grad_weight, true);
}

template <class F>
void for_each_tensor(GqaRopeArgs& a, F&& f) {
  f("grad_output", a.grad_output, false);
  f("hidden_states", a.hidden_states, false);
  f("cos", a.cos, false);
  f("sin", a.sin, false);
  f("q_weight", a.q_weight, false);
  f("k_weight", a.k_weight, false);
  f("v_weight", a.v_weight, false);
  f("o_weight", a.o_weight, false);
  f("query_states", a.query_states, false);
  f("key_states", a.key_states, false);
  f("value_states", a.value_states, false);
  f("attn_weights", a.attn_weights, false);
  f("attn_output", a.attn_output, false);
  f("grad_hidden_states", a.grad_hidden_states, true);
  f("grad_q_weight", a.grad_q_weight, true);
  f("grad_k_weight", a.grad_k_weight, true);
  f("grad_v_weight", a.grad_v_weight, true);
  f("grad_o_weight", a.grad_o_weight, true);
}

template <class F>
void for_each_tensor(VisionMhaArgs& a, F&& f) {
  f("grad_output", a.grad_output, false);
  f("x", a.x, false);
  f("x_mean", a.x_mean, false);
  f("x_var", a.x_var, false);
  f("x_norm", a.x_norm, false);
  f("ln_weight", a.ln_weight, false);
  f("qkv_weight", a.qkv_weight, false);
  f("q", a.q, false);
  f("k", a.k, false);
  f("v", a.v, false);
  f("attn_weights", a.attn_weights, false);
  f("attn_output", a.attn_output, false);
  f("out_weight", a.out_weight, false);
  f("grad_x", a.grad_x, true);
  f("grad_qkv_weight", a.grad_qkv_weight, true);
  f("grad_qkv_bias", a.grad_qkv_bias, true);
  f("grad_out_weight", a.grad_out_weight, true);
  f("grad_out_bias", a.grad_out_bias, true);
  f("grad_ln_weight", a.grad_ln_weight, true);
  f("grad_ln_bias", a.grad_ln_bias, true);
}

template <class F>
void for_each_tensor(VisionVarlenArgs& a, F&& f) {
  f("grad_output", a.grad_output, false);
  f("hidden_states", a.hidden_states, false);
  f("qkv_weight", a.qkv_weight, false);
  f("qkv_bias", a.qkv_bias, false);
  f("proj_weight", a.proj_weight, false);
  f("proj_bias", a.proj_bias, false);
  f("cos", a.cos, false);
  f("sin", a.sin, false);
  f("cu_seqlens", a.cu_seqlens, false);
  f("grad_hidden_states", a.grad_hidden_states, true);
  f("grad_qkv_weight", a.grad_qkv_weight, true);
  f("grad_qkv_bias", a.grad_qkv_bias, true);
  f("grad_proj_weight", a.grad_proj_weight, true);
  f("grad_proj_bias", a.grad_proj_bias, true);
}

}  // namespace attnbwd::detail
