// Portable out_proj_backward (spec §2): the reference upcasts dY, X, W to fp32, runs two fp32 GEMMs
// and rounds each result to bf16 once; here the same, the GEMMs through Kokkos Kernels (cuBLAS on
// CUDA), and the head split of G = dY·W done by the kernel that rounds it.
#include <cstdint>

#include "portable/common.hpp"
#include "portable/portable.hpp"

namespace attnbwd::portable {

// grad_attn_output[b,h,s,d] = bf16(G[b·S+s, h·D+d]). One team per token row of G: the row is read
// contiguously and lands as H runs of D contiguous elements, so both sides stay coalesced without
// staging through scratch.
template <class ExecSpace>
void split_heads_rounded(const ExecSpace& exec, const OutProjShape& s, const float* G, bf16* out) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  const std::int64_t S = s.seq_len, H = s.num_heads, D = s.head_dim, F = s.hidden();
  Kokkos::parallel_for(
      "attnbwd::out_proj_backward::split_heads", Policy(exec, static_cast<int>(s.tokens()), Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        const std::int64_t t = team.league_rank(), b = t / S, tok = t % S;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, F), [&](const std::int64_t f) {
          const std::int64_t h = f / D, d = f % D;
          out[((b * H + h) * S + tok) * D + d] = bf16(G[t * F + f]);
        });
      });
}

template <class ExecSpace>
void out_proj_backward(const ExecSpace& exec, const OutProjShape& s, const OutProjArgs& a, const Options&) {
  const std::int64_t T = s.tokens(), F = s.hidden();
  auto dY = workspace<float>(exec, "attnbwd::grad_output_fp32", T * F);
  auto X = workspace<float>(exec, "attnbwd::reshaped_fp32", T * F);
  auto W = workspace<float>(exec, "attnbwd::weight_fp32", F * F);
  upcast(exec, a.grad_output.data, dY.data(), T * F);
  upcast(exec, a.reshaped.data, X.data(), T * F);
  upcast(exec, a.weight.data, W.data(), F * F);

  auto G = workspace<float>(exec, "attnbwd::G", T * F);  // dY·W, [T, F]
  gemm(exec, false, false, T, F, F, 1.0f, dY.data(), W.data(), 0.0f, G.data());
  split_heads_rounded(exec, s, G.data(), a.grad_attn_output.data);

  auto dW = workspace<float>(exec, "attnbwd::grad_weight_fp32", F * F);  // dYᵀ·X, summed over T
  gemm(exec, true, false, F, F, T, 1.0f, dY.data(), X.data(), 0.0f, dW.data());
  round_to_bf16(exec, dW.data(), a.grad_weight.data, F * F);
}

ATTNBWD_PORTABLE_INSTANTIATE(out_proj_backward, OutProjShape, OutProjArgs)

}  // namespace attnbwd::portable
