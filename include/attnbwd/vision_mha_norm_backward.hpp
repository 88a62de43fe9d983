// vision_mha_norm_backward — Molmo ViT pre-norm attention block backward (spec §4), fp32:
// LayerNorm with the reference's σ² quirk, MHA from the given P, QKV/out projections, residual.
#pragma once

#include "attnbwd/detail/views.hpp"
#include "attnbwd/error.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd {

template <class MemorySpace>
struct VisionMhaInputs {
  detail::View<const float***, MemorySpace> grad_output;    // [B,S,E]  dY
  detail::View<const float***, MemorySpace> x;              // [B,S,E]  block input
  detail::View<const float***, MemorySpace> x_mean;         // [B,S,1]
  detail::View<const float***, MemorySpace> x_var;          // [B,S,1]
  detail::View<const float***, MemorySpace> x_norm;         // [B,S,E]  QKV GEMM input
  detail::View<const float*, MemorySpace> ln_weight;        // [E]      γ
  detail::View<const float**, MemorySpace> qkv_weight;      // [3E,E]
  detail::View<const float****, MemorySpace> q;             // [B,H,S,D] (unscaled)
  detail::View<const float****, MemorySpace> k;             // [B,H,S,D]
  detail::View<const float****, MemorySpace> v;             // [B,H,S,D]
  detail::View<const float****, MemorySpace> attn_weights;  // [B,H,S,S] P
  detail::View<const float***, MemorySpace> attn_output;    // [B,S,E]
  detail::View<const float**, MemorySpace> out_weight;      // [E,E]
  double scale = 0.0;                                        // used as float
  double norm_eps = 0.0;                                     // used as float
};

template <class MemorySpace>
struct VisionMhaOutputs {
  detail::View<float***, MemorySpace> grad_x;          // [B,S,E]
  detail::View<float**, MemorySpace> grad_qkv_weight;  // [3E,E]
  detail::View<float*, MemorySpace> grad_qkv_bias;     // [3E]
  detail::View<float**, MemorySpace> grad_out_weight;  // [E,E]
  detail::View<float*, MemorySpace> grad_out_bias;     // [E]
  detail::View<float*, MemorySpace> grad_ln_weight;    // [E]
  detail::View<float*, MemorySpace> grad_ln_bias;      // [E]
};

template <class MemorySpace>
VisionMhaArgs make_args(const VisionMhaInputs<MemorySpace>& in, const VisionMhaOutputs<MemorySpace>& out) {
  VisionMhaArgs a;
  a.memory = detail::memory_of<MemorySpace>();
  a.grad_output = detail::tensor<3>(in.grad_output);
  a.x = detail::tensor<3>(in.x);
  a.x_mean = detail::tensor<3>(in.x_mean);
  a.x_var = detail::tensor<3>(in.x_var);
  a.x_norm = detail::tensor<3>(in.x_norm);
  a.ln_weight = detail::tensor<1>(in.ln_weight);
  a.qkv_weight = detail::tensor<2>(in.qkv_weight);
  a.q = detail::tensor<4>(in.q);
  a.k = detail::tensor<4>(in.k);
  a.v = detail::tensor<4>(in.v);
  a.attn_weights = detail::tensor<4>(in.attn_weights);
  a.attn_output = detail::tensor<3>(in.attn_output);
  a.out_weight = detail::tensor<2>(in.out_weight);
  a.scale = in.scale;
  a.norm_eps = in.norm_eps;
  a.grad_x = detail::tensor<3>(out.grad_x);
  a.grad_qkv_weight = detail::tensor<2>(out.grad_qkv_weight);
  a.grad_qkv_bias = detail::tensor<1>(out.grad_qkv_bias);
  a.grad_out_weight = detail::tensor<2>(out.grad_out_weight);
  a.grad_out_bias = detail::tensor<1>(out.grad_out_bias);
  a.grad_ln_weight = detail::tensor<1>(out.grad_ln_weight);
  a.grad_ln_bias = detail::tensor<1>(out.grad_ln_bias);
  return a;
}

// Runs on `exec` and returns the backend that ran; fence `exec` before reading outputs.
// Throws attnbwd::Error before any write.
template <class ExecSpace>
Backend vision_mha_norm_backward(const ExecSpace& exec,
                              const VisionMhaInputs<typename ExecSpace::memory_space>& in,
                              const VisionMhaOutputs<typename ExecSpace::memory_space>& out,
                              const Options& opts = {}) {
  return detail::run(exec, make_args(in, out), opts);
}

}  // namespace attnbwd
