// The serial oracle's two bf16 ops with every bf16 rounding removed: double inputs, double math,
// double outputs. Same code path as the public entry points (serial.hpp), run with the NoRounding
// policy (rounding.hpp). For tests only: finite differences of a float64 forward need inputs that
// are not bf16 values, and the bf16 oracle's rounding error is measured against these.
#pragma once

#include <vector>

#include "attnbwd/args.hpp"

namespace attnbwd::serial::exact {

// Same tensors as OutProjArgs' inputs, as doubles.
struct OutProjInputs {
  const double* grad_output = nullptr;  // [B,S,hidden]
  const double* reshaped = nullptr;     // [B,S,hidden]
  const double* weight = nullptr;       // [hidden,hidden]
};
struct OutProjGrads {
  std::vector<double> grad_attn_output;  // [B,H,S,D]
  std::vector<double> grad_weight;       // [hidden,hidden]
};
OutProjGrads out_proj_backward(const OutProjShape& s, const OutProjInputs& in);

// Same tensors as GqaRopeArgs' inputs, as doubles; `scaling` is used as a double here.
struct GqaRopeInputs {
  const double* grad_output = nullptr;    // [B,S,hidden]
  const double* hidden_states = nullptr;  // [B,S,hidden]
  const double* cos = nullptr;            // [B,S,D]
  const double* sin = nullptr;            // [B,S,D]
  const double* q_weight = nullptr;       // [Hq·D, hidden]
  const double* k_weight = nullptr;       // [Hkv·D, hidden]
  const double* v_weight = nullptr;       // [Hkv·D, hidden]
  const double* o_weight = nullptr;       // [hidden, Hq·D]
  const double* query_states = nullptr;   // [B,Hq,S,D]
  const double* key_states = nullptr;     // [B,Hq,S,D]
  const double* value_states = nullptr;   // [B,Hq,S,D]
  const double* attn_weights = nullptr;   // [B,Hq,S,S]
  const double* attn_output = nullptr;    // [B,S,Hq·D]
  double scaling = 0.0;
};
struct GqaRopeGrads {
  std::vector<double> grad_hidden_states;  // [B,S,hidden]
  std::vector<double> grad_q_weight;       // [Hq·D, hidden]
  std::vector<double> grad_k_weight;       // [Hkv·D, hidden]
  std::vector<double> grad_v_weight;       // [Hkv·D, hidden]
  std::vector<double> grad_o_weight;       // [hidden, Hq·D]
};
GqaRopeGrads gqa_rope_backward(const GqaRopeShape& s, const GqaRopeInputs& in);

}  // namespace attnbwd::serial::exact
