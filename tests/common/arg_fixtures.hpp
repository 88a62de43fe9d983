// Small, valid argument sets for each operation, owning their host buffers: the starting point of
// validation and dispatch tests. Inputs are random; outputs are filled with a poison pattern.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "attnbwd/args.hpp"
#include "common/rng.hpp"

namespace attnbwd::test {

class Buffers {
 public:
  explicit Buffers(std::uint64_t seed) : rng_(seed) {}

  template <class T>
  Tensor<T> input(std::initializer_list<std::int64_t> ext) {
    Tensor<T> t = alloc<T>(ext);
    auto* p = const_cast<std::remove_const_t<T>*>(t.data);
    for (std::int64_t i = 0; i < t.size(); ++i) p[i] = value<std::remove_const_t<T>>();
    return t;
  }

  template <class T>
  Tensor<T> output(std::initializer_list<std::int64_t> ext) {
    Tensor<T> t = alloc<T>(ext);
    std::memset(static_cast<void*>(t.data), kPoison, static_cast<std::size_t>(t.size()) * sizeof(T));
    return t;
  }

  static constexpr unsigned char kPoison = 0xA5;

 private:
  template <class T>
  Tensor<T> alloc(std::initializer_list<std::int64_t> ext) {
    Tensor<T> t;
    t.rank = static_cast<int>(ext.size());
    int i = 0;
    for (auto e : ext) t.extent[i++] = e;
    const std::size_t bytes = static_cast<std::size_t>(t.size()) * sizeof(T);
    store_.push_back(std::make_unique<unsigned char[]>(bytes + 64));
    t.data = reinterpret_cast<T*>(store_.back().get());
    return t;
  }
  template <class T>
  T value() {
    if constexpr (std::is_same_v<T, bf16>) return bf16(static_cast<float>(rng_.normal()));
    else if constexpr (std::is_same_v<T, std::int32_t>) return 0;
    else return static_cast<T>(rng_.normal());
  }

  Rng rng_;
  std::vector<std::unique_ptr<unsigned char[]>> store_;
};

struct OutProjFixture {
  explicit OutProjFixture(std::uint64_t seed) : buf(seed) {
    const std::int64_t B = 2, S = 3, H = 2, D = 4, Hd = H * D;
    a.grad_output = buf.input<const bf16>({B, S, Hd});
    a.reshaped = buf.input<const bf16>({B, S, Hd});
    a.weight = buf.input<const bf16>({Hd, Hd});
    a.grad_attn_output = buf.output<bf16>({B, H, S, D});
    a.grad_weight = buf.output<bf16>({Hd, Hd});
  }
  Buffers buf;
  OutProjArgs a;
};

struct GqaRopeFixture {
  explicit GqaRopeFixture(std::uint64_t seed) : buf(seed) {
    const std::int64_t B = 2, S = 3, Hq = 4, Hkv = 2, D = 4, Hd = 6;
    a.grad_output = buf.input<const bf16>({B, S, Hd});
    a.hidden_states = buf.input<const bf16>({B, S, Hd});
    a.cos = buf.input<const bf16>({B, S, D});
    a.sin = buf.input<const bf16>({B, S, D});
    a.q_weight = buf.input<const bf16>({Hq * D, Hd});
    a.k_weight = buf.input<const bf16>({Hkv * D, Hd});
    a.v_weight = buf.input<const bf16>({Hkv * D, Hd});
    a.o_weight = buf.input<const bf16>({Hd, Hq * D});
    a.query_states = buf.input<const bf16>({B, Hq, S, D});
    a.key_states = buf.input<const bf16>({B, Hq, S, D});
    a.value_states = buf.input<const bf16>({B, Hq, S, D});
    a.attn_weights = buf.input<const bf16>({B, Hq, S, S});
    a.attn_output = buf.input<const bf16>({B, S, Hq * D});
    a.scaling = 0.5;
    a.grad_hidden_states = buf.output<bf16>({B, S, Hd});
    a.grad_q_weight = buf.output<bf16>({Hq * D, Hd});
    a.grad_k_weight = buf.output<bf16>({Hkv * D, Hd});
    a.grad_v_weight = buf.output<bf16>({Hkv * D, Hd});
    a.grad_o_weight = buf.output<bf16>({Hd, Hq * D});
  }
  Buffers buf;
  GqaRopeArgs a;
};

struct VisionMhaFixture {
  explicit VisionMhaFixture(std::uint64_t seed) : buf(seed) {
    const std::int64_t B = 2, S = 3, H = 2, D = 4, E = H * D;
    a.grad_output = buf.input<const float>({B, S, E});
    a.x = buf.input<const float>({B, S, E});
    a.x_mean = buf.input<const float>({B, S, 1});
    a.x_var = buf.input<const float>({B, S, 1});
    a.x_norm = buf.input<const float>({B, S, E});
    a.ln_weight = buf.input<const float>({E});
    a.qkv_weight = buf.input<const float>({3 * E, E});
    a.q = buf.input<const float>({B, H, S, D});
    a.k = buf.input<const float>({B, H, S, D});
    a.v = buf.input<const float>({B, H, S, D});
    a.attn_weights = buf.input<const float>({B, H, S, S});
    a.attn_output = buf.input<const float>({B, S, E});
    a.out_weight = buf.input<const float>({E, E});
    // x_var must be positive for a finite result: make it so.
    auto* var = const_cast<float*>(a.x_var.data);
    for (std::int64_t i = 0; i < a.x_var.size(); ++i) var[i] = var[i] * var[i] + 0.1f;
    a.scale = 0.125;
    a.norm_eps = 1e-5;
    a.grad_x = buf.output<float>({B, S, E});
    a.grad_qkv_weight = buf.output<float>({3 * E, E});
    a.grad_qkv_bias = buf.output<float>({3 * E});
    a.grad_out_weight = buf.output<float>({E, E});
    a.grad_out_bias = buf.output<float>({E});
    a.grad_ln_weight = buf.output<float>({E});
    a.grad_ln_bias = buf.output<float>({E});
  }
  Buffers buf;
  VisionMhaArgs a;
};

struct VisionVarlenFixture {
  explicit VisionVarlenFixture(std::uint64_t seed) : buf(seed) {
    const std::int64_t S = 5, H = 2, D = 4, C = H * D;
    a.grad_output = buf.input<const float>({S, C});
    a.hidden_states = buf.input<const float>({S, C});
    a.qkv_weight = buf.input<const float>({3 * C, C});
    a.qkv_bias = buf.input<const float>({3 * C});
    a.proj_weight = buf.input<const float>({C, C});
    a.proj_bias = buf.input<const float>({C});
    a.cos = buf.input<const float>({S, D});
    a.sin = buf.input<const float>({S, D});
    a.cu_seqlens = buf.input<const std::int32_t>({3});
    auto* cu = const_cast<std::int32_t*>(a.cu_seqlens.data);
    cu[0] = 0;
    cu[1] = 2;
    cu[2] = 5;
    a.attention_dropout = 0.0;
    a.scaling = 0.5;
    a.grad_hidden_states = buf.output<float>({S, C});
    a.grad_qkv_weight = buf.output<float>({3 * C, C});
    a.grad_qkv_bias = buf.output<float>({3 * C});
    a.grad_proj_weight = buf.output<float>({C, C});
    a.grad_proj_bias = buf.output<float>({C});
  }
  Buffers buf;
  VisionVarlenArgs a;
};

}  // namespace attnbwd::test
