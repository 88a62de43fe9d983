// The pointer-level description of each operation's arguments: what every backend (serial oracle,
// portable Kokkos path, CUDA fast path) receives after validation. No Kokkos types here, so the CUDA
// backend and tools can use it without Kokkos headers.
//
// Names follow the spec (../shared/spec/problems.md) exactly. Every tensor is contiguous, row-major.
#pragma once

#include <cstdint>

#include "attnbwd/bf16.hpp"

namespace attnbwd {

// Where a tensor's memory lives.
enum class Memory { Host, Device };

// A contiguous row-major tensor: pointer, rank (0..4) and extents.
template <class T>
struct Tensor {
  T* data = nullptr;
  int rank = 0;
  std::int64_t extent[4] = {0, 0, 0, 0};
  bool contiguous = true;  // false when built from a strided View: validation rejects it

  std::int64_t size() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= extent[i];
    return n;
  }
};

template <class T>
Tensor<T> make_tensor(T* data, std::int64_t e0) {
  Tensor<T> t;
  t.data = data;
  t.rank = 1;
  t.extent[0] = e0;
  return t;
}
template <class T>
Tensor<T> make_tensor(T* data, std::int64_t e0, std::int64_t e1) {
  Tensor<T> t = make_tensor(data, e0);
  t.rank = 2;
  t.extent[1] = e1;
  return t;
}
template <class T>
Tensor<T> make_tensor(T* data, std::int64_t e0, std::int64_t e1, std::int64_t e2) {
  Tensor<T> t = make_tensor(data, e0, e1);
  t.rank = 3;
  t.extent[2] = e2;
  return t;
}
template <class T>
Tensor<T> make_tensor(T* data, std::int64_t e0, std::int64_t e1, std::int64_t e2, std::int64_t e3) {
  Tensor<T> t = make_tensor(data, e0, e1, e2);
  t.rank = 4;
  t.extent[3] = e3;
  return t;
}

// ---------------------------------------------------------------------------------------------
// out_proj_backward (spec §2, LFM2 004). bf16.
//   grad_weight = dYᵀ·X ; grad_attn_output[b,h,s,d] = (dY·W)[b·S+s, h·D+d]
struct OutProjShape {
  std::int64_t batch = 0, seq_len = 0, num_heads = 0, head_dim = 0;
  std::int64_t hidden() const { return num_heads * head_dim; }
  std::int64_t tokens() const { return batch * seq_len; }
};

struct OutProjArgs {
  Memory memory = Memory::Host;
  Tensor<const bf16> grad_output;  // [B,S,hidden]
  Tensor<const bf16> reshaped;     // [B,S,hidden]
  Tensor<const bf16> weight;       // [hidden,hidden]  (out,in)
  Tensor<bf16> grad_attn_output;   // [B,H,S,D]
  Tensor<bf16> grad_weight;        // [hidden,hidden]
};

// ---------------------------------------------------------------------------------------------
// gqa_rope_backward (spec §3, Mistral 003). bf16.
struct GqaRopeShape {
  std::int64_t batch = 0, seq_len = 0, hidden_size = 0, num_heads = 0, num_kv_heads = 0,
               head_dim = 0;
  std::int64_t tokens() const { return batch * seq_len; }
  std::int64_t q_proj_size() const { return num_heads * head_dim; }
  std::int64_t kv_proj_size() const { return num_kv_heads * head_dim; }
  std::int64_t group() const { return num_heads / num_kv_heads; }
};

struct GqaRopeArgs {
  Memory memory = Memory::Host;
  Tensor<const bf16> grad_output;    // [B,S,hidden]
  Tensor<const bf16> hidden_states;  // [B,S,hidden]
  Tensor<const bf16> cos, sin;       // [B,S,D]
  Tensor<const bf16> q_weight;       // [Hq·D, hidden]
  Tensor<const bf16> k_weight;       // [Hkv·D, hidden]
  Tensor<const bf16> v_weight;       // [Hkv·D, hidden]
  Tensor<const bf16> o_weight;       // [hidden, Hq·D]
  Tensor<const bf16> query_states;   // [B,Hq,S,D] after RoPE
  Tensor<const bf16> key_states;     // [B,Hq,S,D] after RoPE and repeat_kv
  Tensor<const bf16> value_states;   // [B,Hq,S,D] after repeat_kv
  Tensor<const bf16> attn_weights;   // [B,Hq,S,S]
  Tensor<const bf16> attn_output;    // [B,S,Hq·D]
  double scaling = 0.0;              // used as float, as the reference does
  Tensor<bf16> grad_hidden_states;   // [B,S,hidden]
  Tensor<bf16> grad_q_weight;        // [Hq·D, hidden]
  Tensor<bf16> grad_k_weight;        // [Hkv·D, hidden]
  Tensor<bf16> grad_v_weight;        // [Hkv·D, hidden]
  Tensor<bf16> grad_o_weight;        // [hidden, Hq·D]
};

// ---------------------------------------------------------------------------------------------
// vision_mha_norm_backward (spec §4, Molmo 001). fp32.
struct VisionMhaShape {
  std::int64_t batch = 0, seq_len = 0, embed_dim = 0, num_heads = 0, head_dim = 0;
  std::int64_t tokens() const { return batch * seq_len; }
  std::int64_t qkv_dim() const { return 3 * embed_dim; }
};

struct VisionMhaArgs {
  Memory memory = Memory::Host;
  Tensor<const float> grad_output;   // [B,S,E]
  Tensor<const float> x;             // [B,S,E]
  Tensor<const float> x_mean;        // [B,S,1]
  Tensor<const float> x_var;         // [B,S,1]
  Tensor<const float> x_norm;        // [B,S,E]
  Tensor<const float> ln_weight;     // [E]
  Tensor<const float> qkv_weight;    // [3E,E]
  Tensor<const float> q, k, v;       // [B,H,S,D]
  Tensor<const float> attn_weights;  // [B,H,S,S]
  Tensor<const float> attn_output;   // [B,S,E]
  Tensor<const float> out_weight;    // [E,E]
  double scale = 0.0;                // used as float, as the reference does
  double norm_eps = 0.0;             // used as float
  Tensor<float> grad_x;              // [B,S,E]
  Tensor<float> grad_qkv_weight;     // [3E,E]
  Tensor<float> grad_qkv_bias;       // [3E]
  Tensor<float> grad_out_weight;     // [E,E]
  Tensor<float> grad_out_bias;       // [E]
  Tensor<float> grad_ln_weight;      // [E]
  Tensor<float> grad_ln_bias;        // [E]
};

// ---------------------------------------------------------------------------------------------
// vision_varlen_rope_backward (spec §5, Qwen3-VL 017). fp32; cu_seqlens int32.
struct VisionVarlenShape {
  std::int64_t total_seq_len = 0, num_sequences = 0, hidden_size = 0, num_heads = 0, head_dim = 0;
  std::int64_t qkv_out_size() const { return 3 * hidden_size; }
};

struct VisionVarlenArgs {
  Memory memory = Memory::Host;
  Tensor<const float> grad_output;        // [S,C]
  Tensor<const float> hidden_states;      // [S,C]
  Tensor<const float> qkv_weight;         // [3C,C]
  Tensor<const float> qkv_bias;           // [3C]
  Tensor<const float> proj_weight;        // [C,C]
  Tensor<const float> proj_bias;          // [C]   accepted, unused (as in the reference)
  Tensor<const float> cos, sin;           // [S,D]
  Tensor<const std::int32_t> cu_seqlens;  // [n+1], in `memory`
  // Optional host copy of cu_seqlens (same values). When cu_seqlens lives on the device and this is
  // null, the library copies it to the host (a device->host transfer inside the call; the CUDA fast path
  // overlaps it with the op's first part, which writes no output, and validates the values before queuing the rest).
  const std::int32_t* cu_seqlens_host = nullptr;
  double attention_dropout = 0.0;  // accepted, unused (as in the reference)
  double scaling = 0.0;            // used as float
  Tensor<float> grad_hidden_states;  // [S,C]
  Tensor<float> grad_qkv_weight;     // [3C,C]
  Tensor<float> grad_qkv_bias;       // [3C]
  Tensor<float> grad_proj_weight;    // [C,C]
  Tensor<float> grad_proj_bias;      // [C]
};

// ---------------------------------------------------------------------------------------------
// Validation: checks every argument (non-null, ranks, extents consistent, contiguity, finite scalars,
// cu_seqlens monotone from 0 to S, outputs not overlapping inputs or each other) and returns the shape.
// Throws attnbwd::Error naming the argument. Reads no tensor data except cu_seqlens, which it reads
// from `cu_seqlens_host` (required to be non-null when memory is Device).
OutProjShape validate(const OutProjArgs& a);
GqaRopeShape validate(const GqaRopeArgs& a);
VisionMhaShape validate(const VisionMhaArgs& a);
VisionVarlenShape validate(const VisionVarlenArgs& a);

}  // namespace attnbwd
