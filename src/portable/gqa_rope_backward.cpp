// Portable gqa_rope_backward (spec §3). Every bf16 GEMM of the reference is an fp32 GEMM on exact
// fp32 copies of its bf16 operands, rounded once: the projection GEMMs (steps 1, 9) through Kokkos
// Kernels (cuBLAS on CUDA), the per-head attention GEMMs (steps 3-5) inside the TeamPolicy kernels of
// bf16_attention.hpp. bf16 intermediates are held as bf16-exact floats, so a kernel's output is
// directly the next GEMM's operand.
#include <algorithm>
#include <cstdint>

#include "portable/bf16_attention.hpp"
#include "portable/bf16_ops.hpp"
#include "portable/common.hpp"
#include "portable/portable.hpp"

namespace attnbwd::portable {

template <class ExecSpace>
void gqa_rope_backward(const ExecSpace& exec, const GqaRopeShape& s, const GqaRopeArgs& a, const Options&) {
  using std::int64_t;
  const int64_t T = s.tokens(), HS = s.hidden_size, QP = s.q_proj_size(), KP = s.kv_proj_size();
  const auto upcast_copy = [&](const char* label, const Tensor<const bf16>& t) {
    auto w = workspace<float>(exec, label, t.size());
    upcast(exec, t.data, w.data(), t.size());
    return w;
  };
  const auto dY = upcast_copy("attnbwd::dY", a.grad_output);
  const auto Xh = upcast_copy("attnbwd::hidden_states", a.hidden_states);
  // One buffer for the four weight gradients before rounding, one after another.
  auto dW = workspace<float>(exec, "attnbwd::grad_weight_fp32", std::max(HS * QP, KP * HS));

  // Step 1: dA = bf16(dY·Wo); grad_o_weight = bf16(dYᵀ·A).
  auto dA = workspace<float>(exec, "attnbwd::dA", T * QP);
  {
    const auto Wo = upcast_copy("attnbwd::o_weight", a.o_weight);
    const auto A = upcast_copy("attnbwd::attn_output", a.attn_output);
    gemm(exec, false, false, T, QP, HS, 1.0f, dY.data(), Wo.data(), 0.0f, dA.data());
    bf16_ops::round_in_place(exec, dA.data(), T * QP);
    gemm(exec, true, false, HS, QP, T, 1.0f, dY.data(), A.data(), 0.0f, dW.data());
    round_to_bf16(exec, dW.data(), a.grad_o_weight.data, HS * QP);
  }

  // Steps 2-8: attention backward, GQA reduction, RoPE, head merge.
  auto dS = workspace<bf16>(exec, "attnbwd::dS", s.batch * s.num_heads * s.seq_len * s.seq_len);
  auto dQp = workspace<float>(exec, "attnbwd::dQp", T * QP);
  auto dKp = workspace<float>(exec, "attnbwd::dKp", T * KP);
  auto dVp = workspace<float>(exec, "attnbwd::dVp", T * KP);
  const bf16_attention::AttentionOperands ops{
      s.batch, s.seq_len, s.num_heads, s.num_kv_heads, s.head_dim,
      dA.data(), a.attn_weights.data, a.query_states.data, a.key_states.data, a.value_states.data,
      a.cos.data, a.sin.data, static_cast<float>(a.scaling),
      dS.data(), dQp.data(), dKp.data(), dVp.data()};
  bf16_attention::query_side(exec, ops);
  bf16_attention::key_side<true>(exec, ops);
  bf16_attention::key_side<false>(exec, ops);

  // Step 9: grad_{q,k,v}_weight = bf16(dXpᵀ·Xh).
  const auto weight_grad = [&](const float* dXp, int64_t P, bf16* out) {
    gemm(exec, true, false, P, HS, T, 1.0f, dXp, Xh.data(), 0.0f, dW.data());
    round_to_bf16(exec, dW.data(), out, P * HS);
  };
  weight_grad(dQp.data(), QP, a.grad_q_weight.data);
  weight_grad(dKp.data(), KP, a.grad_k_weight.data);
  weight_grad(dVp.data(), KP, a.grad_v_weight.data);

  // Steps 9-10: grad_hidden_states = bf16(bf16(dXq + dXk) + dXv), each dX· = bf16(dXp·W).
  // dY is no longer needed: its buffer holds the running sum.
  float* sum = dY.data();
  auto dX = workspace<float>(exec, "attnbwd::dX", T * HS);
  const auto Wq = upcast_copy("attnbwd::q_weight", a.q_weight);
  const auto Wk = upcast_copy("attnbwd::k_weight", a.k_weight);
  const auto Wv = upcast_copy("attnbwd::v_weight", a.v_weight);
  gemm(exec, false, false, T, HS, QP, 1.0f, dQp.data(), Wq.data(), 0.0f, sum);
  gemm(exec, false, false, T, HS, KP, 1.0f, dKp.data(), Wk.data(), 0.0f, dX.data());
  bf16_ops::add_rounded(exec, sum, dX.data(), static_cast<bf16*>(nullptr), T * HS);
  gemm(exec, false, false, T, HS, KP, 1.0f, dVp.data(), Wv.data(), 0.0f, dX.data());
  bf16_ops::add_rounded(exec, sum, dX.data(), a.grad_hidden_states.data, T * HS);
}

ATTNBWD_PORTABLE_INSTANTIATE(gqa_rope_backward, GqaRopeShape, GqaRopeArgs)

}  // namespace attnbwd::portable
