// Serial oracle for out_proj_backward (spec §2): Y = X·Wᵀ, so
//   grad_weight = dYᵀ·X            [hidden, hidden], summed over the T = B·S tokens;
//   G = dY·W, grad_attn_output[b,h,s,d] = G[b·S+s, h·D+d]   (heads split, head axis before s).
// The reference upcasts to fp32, runs two fp32 GEMMs and rounds each result to bf16 once.
#include <cstdint>
#include <vector>

#include "serial/exact.hpp"
#include "serial/rounding.hpp"
#include "serial/serial.hpp"

namespace attnbwd::serial {
namespace {

template <class R, class In>
exact::OutProjGrads backward(const OutProjShape& s, const In* dY, const In* X, const In* W) {
  const std::int64_t T = s.tokens(), F = s.hidden(), S = s.seq_len, H = s.num_heads, D = s.head_dim;
  exact::OutProjGrads out;

  std::vector<double> G(static_cast<std::size_t>(T * F));
  rounded_gemm<R>(T, F, F, dY, F, false, W, F, false, G.data(), F);
  out.grad_attn_output.resize(G.size());
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < S; ++t)
        for (std::int64_t d = 0; d < D; ++d)
          out.grad_attn_output[((b * H + h) * S + t) * D + d] = G[(b * S + t) * F + h * D + d];

  out.grad_weight.resize(static_cast<std::size_t>(F * F));
  rounded_gemm<R>(F, F, T, dY, F, true, X, F, false, out.grad_weight.data(), F);
  return out;
}

// Values are bf16-exact doubles, so the conversion is exact.
void store(const std::vector<double>& src, const Tensor<bf16>& dst) {
  for (std::size_t i = 0; i < src.size(); ++i) dst.data[i] = bf16(static_cast<float>(src[i]));
}

}  // namespace

void out_proj_backward(const OutProjShape& s, const OutProjArgs& a) {
  const exact::OutProjGrads g =
      backward<RoundLikeReference>(s, a.grad_output.data, a.reshaped.data, a.weight.data);
  store(g.grad_attn_output, a.grad_attn_output);
  store(g.grad_weight, a.grad_weight);
}

namespace exact {
OutProjGrads out_proj_backward(const OutProjShape& s, const OutProjInputs& in) {
  return backward<NoRounding>(s, in.grad_output, in.reshaped, in.weight);
}
}  // namespace exact

}  // namespace attnbwd::serial
