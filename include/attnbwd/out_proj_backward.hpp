// out_proj_backward — LFM2 attention output projection backward (spec §2), bf16.
//   grad_weight = dYᵀ·X, and grad_attn_output[b,h,s,d] = (dY·W)[b·S+s, h·D+d]
// fp32 GEMMs on upcast operands, each result rounded to bf16 once.
#pragma once

#include "attnbwd/bf16.hpp"
#include "attnbwd/detail/views.hpp"
#include "attnbwd/error.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd {

template <class MemorySpace>
struct OutProjInputs {
  detail::View<const bf16***, MemorySpace> grad_output;  // [B,S,H·D]  dY
  detail::View<const bf16***, MemorySpace> reshaped;     // [B,S,H·D]  X (saved linear input)
  detail::View<const bf16**, MemorySpace> weight;        // [H·D,H·D]  W (out,in)
};

template <class MemorySpace>
struct OutProjOutputs {
  detail::View<bf16****, MemorySpace> grad_attn_output;  // [B,H,S,D]; its extents give H and D
  detail::View<bf16**, MemorySpace> grad_weight;         // [H·D,H·D]
};

template <class MemorySpace>
OutProjArgs make_args(const OutProjInputs<MemorySpace>& in, const OutProjOutputs<MemorySpace>& out) {
  OutProjArgs a;
  a.memory = detail::memory_of<MemorySpace>();
  a.grad_output = detail::tensor<3>(in.grad_output);
  a.reshaped = detail::tensor<3>(in.reshaped);
  a.weight = detail::tensor<2>(in.weight);
  a.grad_attn_output = detail::tensor<4>(out.grad_attn_output);
  a.grad_weight = detail::tensor<2>(out.grad_weight);
  return a;
}

// Runs on `exec` (asynchronously where the backend allows; fence `exec` before reading outputs) and
// returns the backend that ran. Throws attnbwd::Error naming the argument, before writing anything,
// on invalid input.
template <class ExecSpace>
Backend out_proj_backward(const ExecSpace& exec,
                       const OutProjInputs<typename ExecSpace::memory_space>& in,
                       const OutProjOutputs<typename ExecSpace::memory_space>& out,
                       const Options& opts = {}) {
  return detail::run(exec, make_args(in, out), opts);
}

}  // namespace attnbwd
