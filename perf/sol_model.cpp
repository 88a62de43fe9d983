#include "sol_model.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "attnbwd/error.hpp"
#include "tools/gen.hpp"

namespace attnbwd::perf {
namespace {

double axis(const tools::Axes& axes, const char* name) {
  const auto it = axes.find(name);
  if (it == axes.end()) throw Error(name, "axis missing for the SOL model");
  return static_cast<double>(it->second);
}

// The counts below are spec §9's formulas written over the axes instead of their constants, so the
// model follows the workload files. Comments list the tensors each element term stands for.

Work out_proj(const tools::Axes& a) {  // 004, bf16
  const double T = axis(a, "batch_size") * axis(a, "seq_len"), H = axis(a, "hidden_size");
  Work w;
  w.gemm_flop = 4 * T * H * H;    // dW = dYᵀ·X and dX = dY·W
  w.elements = 3 * T * H + 2 * H * H;  // dY, X, dX; W, dW
  w.min_bytes = 2 * w.elements;
  return w;
}

Work gqa_rope(const tools::Axes& a) {  // 003, bf16
  const double B = axis(a, "batch_size"), S = axis(a, "seq_len"), T = B * S;
  const double hid = axis(a, "hidden_size"), qp = axis(a, "q_proj_size"), kvp = axis(a, "kv_proj_size");
  const double Hq = axis(a, "num_attention_heads"), D = axis(a, "head_dim");
  Work w;
  // dA, dWo, dXq, dWq at q width; dXk, dWk, dXv, dWv at kv width; dP, dV, dQ, dK at 32 heads.
  w.gemm_flop = 2 * T * hid * (4 * qp + 4 * kvp) + 8 * B * Hq * S * S * D;
  w.elements = T * (3 * hid + 2 * D + 3 * Hq * D + qp)  // dY, Xh, dXh; cos, sin; q/k/v states; A
               + B * Hq * S * S                         // P
               + 2 * (2 * qp * hid + 2 * kvp * hid);    // Wq, Wo, Wk, Wv and their gradients
  w.min_bytes = 2 * w.elements;
  return w;
}

Work vision_mha(const tools::Axes& a) {  // 001, fp32
  const double B = axis(a, "batch_size"), S = axis(a, "seq_len"), N = B * S;
  const double E = axis(a, "embed_dim"), H = axis(a, "num_heads"), D = axis(a, "head_dim");
  Work w;
  // dA, dWo (2·N·E² each); dXn, dWqkv (6·N·E² each); dP, dV, dQ, dK (2·B·H·S²·D each).
  w.gemm_flop = 16 * N * E * E + 8 * B * H * S * S * D;
  w.elements = 8 * N * E         // dY, x, x_norm, q, k, v, A, grad_x
               + 2 * N           // x_mean, x_var
               + B * H * S * S   // P
               + 8 * E * E       // Wqkv, Wo and their gradients
               + 7 * E;          // ln_weight; qkv, out, ln bias/weight gradients
  w.min_bytes = 4 * w.elements;
  return w;
}

Work vision_varlen(const tools::Axes& a) {  // 017, fp32 (+ int32 cu_seqlens)
  const auto S_int = static_cast<std::int64_t>(axis(a, "total_seq_len"));
  const auto n_int = static_cast<std::int64_t>(axis(a, "num_sequences"));
  const double S = static_cast<double>(S_int), n = static_cast<double>(n_int);
  const double C = axis(a, "hidden_size"), D = axis(a, "head_dim");
  const std::vector<std::int32_t> cu = tools::even_cu_seqlens(S_int, n_int);
  double sum_l2 = 0;
  for (std::size_t i = 0; i + 1 < cu.size(); ++i) {
    const double L = cu[i + 1] - cu[i];
    sum_l2 += L * L;
  }
  Work w;
  // Forward QKV, dX, dWqkv (6·S·C² each); dWp, dAO (2·S·C² each); forward QKᵀ and PV, dP, dV,
  // dQ, dK (2·C·ΣL² each).
  w.gemm_flop = 22 * S * C * C + 12 * C * sum_l2;
  // dY, X, dX; cos, sin; Wqkv, Wp and their gradients; qkv_bias and the two bias gradients
  // (proj_bias is unused, so not read).
  const double float_elements = 3 * S * C + 2 * D * S + 8 * C * C + 7 * C;
  w.elements = float_elements + (n + 1);  // + cu_seqlens
  w.min_bytes = 4 * float_elements + 4 * (n + 1);
  return w;
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

Work workload_work(const std::string& op, const tools::Axes& axes) {
  if (op == "out_proj_backward") return out_proj(axes);
  if (op == "gqa_rope_backward") return gqa_rope(axes);
  if (op == "vision_mha_norm_backward") return vision_mha(axes);
  if (op == "vision_varlen_rope_backward") return vision_varlen(axes);
  throw Error("op", "no SOL model for \"" + op + "\"");
}

const Peaks& h200_peaks() {
  static const Peaks p{"H200", 989.4e12, 4.8e12};
  return p;
}

const Peaks& b200_peaks() {
  static const Peaks p{"B200", 1.811e15, 7.667e12};
  return p;
}

PeakChoice peaks_for_device(const std::string& device_name) {
  const std::string name = upper(device_name);
  for (const Peaks* p : {&h200_peaks(), &b200_peaks()})
    if (name.find(p->model) != std::string::npos) return {*p, true, p->model + " model"};
  if (device_name.empty())
    return {h200_peaks(), false, "no GPU (host run): E is against the H200 model"};
  return {h200_peaks(), false, "unknown GPU \"" + device_name + "\": E is against the H200 model"};
}

double t_gemm(const Work& w, const Peaks& p) { return w.gemm_flop / p.bf16_flops; }
double t_dram_2b(const Work& w, const Peaks& p) { return w.bytes_2b() / p.dram_bytes_per_s; }
double t_sol(const Work& w, const Peaks& p) { return std::max(t_gemm(w, p), t_dram_2b(w, p)); }

}  // namespace attnbwd::perf
