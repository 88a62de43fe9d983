// vision_varlen_rope_backward — Qwen3-VL ViT attention block backward (spec §5), fp32: recomputes
// QKV, rotate-half RoPE and block-diagonal (cu_seqlens) attention, then the full backward.
#pragma once

#include <cstdint>

#include "attnbwd/detail/views.hpp"
#include "attnbwd/error.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd {

template <class MemorySpace>
struct VisionVarlenInputs {
  detail::View<const float**, MemorySpace> grad_output;       // [S,C]  dY
  detail::View<const float**, MemorySpace> hidden_states;     // [S,C]  X
  detail::View<const float**, MemorySpace> qkv_weight;        // [3C,C]
  detail::View<const float*, MemorySpace> qkv_bias;           // [3C]
  detail::View<const float**, MemorySpace> proj_weight;       // [C,C]
  detail::View<const float*, MemorySpace> proj_bias;          // [C]  accepted, unused (as the reference)
  detail::View<const float**, MemorySpace> cos;               // [S,D]; gives D, and H = C/D
  detail::View<const float**, MemorySpace> sin;               // [S,D]
  detail::View<const std::int32_t*, MemorySpace> cu_seqlens;  // [n+1]
  // Optional host copy of cu_seqlens. Without it, device cu_seqlens are copied to the host inside
  // the call (a device->host transfer, as the reference does).
  Kokkos::View<const std::int32_t*, Kokkos::HostSpace> cu_seqlens_host;
  double attention_dropout = 0.0;  // accepted, unused (as the reference)
  double scaling = 0.0;            // used as float
};

template <class MemorySpace>
struct VisionVarlenOutputs {
  detail::View<float**, MemorySpace> grad_hidden_states;  // [S,C]
  detail::View<float**, MemorySpace> grad_qkv_weight;     // [3C,C]
  detail::View<float*, MemorySpace> grad_qkv_bias;        // [3C]
  detail::View<float**, MemorySpace> grad_proj_weight;    // [C,C]
  detail::View<float*, MemorySpace> grad_proj_bias;       // [C]
};

template <class MemorySpace>
VisionVarlenArgs make_args(const VisionVarlenInputs<MemorySpace>& in,
                           const VisionVarlenOutputs<MemorySpace>& out) {
  VisionVarlenArgs a;
  a.memory = detail::memory_of<MemorySpace>();
  a.grad_output = detail::tensor<2>(in.grad_output);
  a.hidden_states = detail::tensor<2>(in.hidden_states);
  a.qkv_weight = detail::tensor<2>(in.qkv_weight);
  a.qkv_bias = detail::tensor<1>(in.qkv_bias);
  a.proj_weight = detail::tensor<2>(in.proj_weight);
  a.proj_bias = detail::tensor<1>(in.proj_bias);
  a.cos = detail::tensor<2>(in.cos);
  a.sin = detail::tensor<2>(in.sin);
  a.cu_seqlens = detail::tensor<1>(in.cu_seqlens);
  a.cu_seqlens_host = in.cu_seqlens_host.data();
  a.attention_dropout = in.attention_dropout;
  a.scaling = in.scaling;
  a.grad_hidden_states = detail::tensor<2>(out.grad_hidden_states);
  a.grad_qkv_weight = detail::tensor<2>(out.grad_qkv_weight);
  a.grad_qkv_bias = detail::tensor<1>(out.grad_qkv_bias);
  a.grad_proj_weight = detail::tensor<2>(out.grad_proj_weight);
  a.grad_proj_bias = detail::tensor<1>(out.grad_proj_bias);
  return a;
}

// Runs on `exec` and returns the backend that ran; fence `exec` before reading outputs.
// Throws attnbwd::Error before any write.
template <class ExecSpace>
Backend vision_varlen_rope_backward(const ExecSpace& exec,
                                 const VisionVarlenInputs<typename ExecSpace::memory_space>& in,
                                 const VisionVarlenOutputs<typename ExecSpace::memory_space>& out,
                                 const Options& opts = {}) {
  VisionVarlenArgs a = make_args(in, out);
  if (a.cu_seqlens_host != nullptr &&
      static_cast<std::int64_t>(in.cu_seqlens_host.extent(0)) != a.cu_seqlens.extent[0])
    throw Error("cu_seqlens_host", "must have the same length as cu_seqlens");
  return detail::run(exec, a, opts);
}

}  // namespace attnbwd
