// Argument validation for the four operations: everything is checked before any output is written.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "attnbwd/args.hpp"
#include "attnbwd/error.hpp"
#include "validate_varlen.hpp"

namespace attnbwd {
namespace {

std::string shape_str(int rank, const std::int64_t* e) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank; ++i) os << (i ? "," : "") << e[i];
  os << ']';
  return os.str();
}

// a·b for non-negative extents; an Error naming `name` when it overflows int64.
std::int64_t product(const char* name, std::int64_t a, std::int64_t b) {
  if (a > 0 && b > 0 && a > std::numeric_limits<std::int64_t>::max() / b)
    throw Error(name, "extents too large: " + std::to_string(a) + " * " + std::to_string(b) + " overflows");
  return a * b;
}

// Byte ranges of every tensor seen, to reject outputs that overlap inputs or each other.
struct Span {
  const char* name;
  std::uintptr_t begin, end;
  bool output;
};

class Checker {
 public:
  template <class T>
  void tensor(const char* name, const Tensor<T>& t, std::vector<std::int64_t> expect, bool output) {
    const int rank = static_cast<int>(expect.size());
    if (t.rank != rank || !same_extents(t, expect)) {
      throw Error(name, "expected shape " + shape_str(rank, expect.data()) + ", got " +
                            shape_str(t.rank, t.extent));
    }
    if (!t.contiguous) throw Error(name, "must be contiguous (row-major, no strides)");
    std::int64_t n = 1;  // t.size(), without overflow: extents this large cannot describe real memory
    for (int i = 0; i < t.rank; ++i) n = product(name, n, t.extent[i]);
    product(name, n, static_cast<std::int64_t>(sizeof(T)));
    if (n > 0 && t.data == nullptr) throw Error(name, "is null");
    if (n > 0) {
      const auto b = reinterpret_cast<std::uintptr_t>(t.data);
      spans_.push_back({name, b, b + static_cast<std::uintptr_t>(n) * sizeof(T), output});
    }
  }

  // Outputs must not overlap any input or any other output.
  void no_aliasing() const {
    for (std::size_t i = 0; i < spans_.size(); ++i)
      for (std::size_t j = 0; j < spans_.size(); ++j) {
        const Span& o = spans_[i];
        const Span& x = spans_[j];
        if (i == j || !o.output || (x.output && j < i)) continue;
        if (o.begin < x.end && x.begin < o.end)
          throw Error(o.name, std::string("overlaps ") + (x.output ? "output " : "input ") + x.name +
                                  " (outputs must not alias inputs or each other)");
      }
  }

 private:
  template <class T>
  static bool same_extents(const Tensor<T>& t, const std::vector<std::int64_t>& e) {
    for (std::size_t i = 0; i < e.size(); ++i)
      if (t.extent[i] != e[i]) return false;
    return true;
  }
  std::vector<Span> spans_;
};

void positive(const char* name, std::int64_t v, const char* what) {
  if (v <= 0) throw Error(name, std::string(what) + " must be positive, got " + std::to_string(v));
}

void finite(const char* name, double v) {
  if (!std::isfinite(v)) throw Error(name, "must be finite");
  // Scalars are used as float, as in the reference: they must also be finite in float.
  if (!std::isfinite(static_cast<float>(v))) throw Error(name, "overflows float");
}

template <class T>
void require_rank(const char* name, const Tensor<T>& t, int rank) {
  if (t.rank != rank)
    throw Error(name, "expected rank " + std::to_string(rank) + ", got rank " + std::to_string(t.rank));
}

void even_head_dim(const char* name, std::int64_t d) {
  if (d % 2 != 0) throw Error(name, "head_dim must be even for rotate-half RoPE, got " + std::to_string(d));
}

}  // namespace

OutProjShape validate(const OutProjArgs& a) {
  require_rank("grad_attn_output", a.grad_attn_output, 4);
  OutProjShape s;
  s.batch = a.grad_attn_output.extent[0];
  s.num_heads = a.grad_attn_output.extent[1];
  s.seq_len = a.grad_attn_output.extent[2];
  s.head_dim = a.grad_attn_output.extent[3];
  positive("grad_attn_output", s.batch, "batch_size");
  positive("grad_attn_output", s.num_heads, "num_heads");
  positive("grad_attn_output", s.seq_len, "seq_len");
  positive("grad_attn_output", s.head_dim, "head_dim");
  const std::int64_t B = s.batch, S = s.seq_len, Hd = product("grad_attn_output", s.num_heads, s.head_dim);
  Checker c;
  c.tensor("grad_output", a.grad_output, {B, S, Hd}, false);
  c.tensor("reshaped", a.reshaped, {B, S, Hd}, false);
  c.tensor("weight", a.weight, {Hd, Hd}, false);
  c.tensor("grad_attn_output", a.grad_attn_output, {B, s.num_heads, S, s.head_dim}, true);
  c.tensor("grad_weight", a.grad_weight, {Hd, Hd}, true);
  c.no_aliasing();
  return s;
}

GqaRopeShape validate(const GqaRopeArgs& a) {
  require_rank("query_states", a.query_states, 4);
  require_rank("grad_output", a.grad_output, 3);
  require_rank("k_weight", a.k_weight, 2);
  GqaRopeShape s;
  s.batch = a.query_states.extent[0];
  s.num_heads = a.query_states.extent[1];
  s.seq_len = a.query_states.extent[2];
  s.head_dim = a.query_states.extent[3];
  s.hidden_size = a.grad_output.extent[2];
  positive("query_states", s.batch, "batch_size");
  positive("query_states", s.num_heads, "num_heads");
  positive("query_states", s.seq_len, "seq_len");
  positive("query_states", s.head_dim, "head_dim");
  positive("grad_output", s.hidden_size, "hidden_size");
  even_head_dim("query_states", s.head_dim);
  if (a.k_weight.extent[0] % s.head_dim != 0)
    throw Error("k_weight", "rows (" + std::to_string(a.k_weight.extent[0]) +
                                ") must be a multiple of head_dim " + std::to_string(s.head_dim));
  s.num_kv_heads = a.k_weight.extent[0] / s.head_dim;
  positive("k_weight", s.num_kv_heads, "num_key_value_heads");
  if (s.num_heads % s.num_kv_heads != 0)
    throw Error("k_weight", "num_heads " + std::to_string(s.num_heads) +
                                " must be a multiple of num_key_value_heads " +
                                std::to_string(s.num_kv_heads));
  finite("scaling", a.scaling);
  const std::int64_t B = s.batch, S = s.seq_len, Hq = s.num_heads, D = s.head_dim;
  const std::int64_t Hd = s.hidden_size, Pq = product("query_states", Hq, D), Pkv = s.kv_proj_size();
  Checker c;
  c.tensor("grad_output", a.grad_output, {B, S, Hd}, false);
  c.tensor("hidden_states", a.hidden_states, {B, S, Hd}, false);
  c.tensor("cos", a.cos, {B, S, D}, false);
  c.tensor("sin", a.sin, {B, S, D}, false);
  c.tensor("q_weight", a.q_weight, {Pq, Hd}, false);
  c.tensor("k_weight", a.k_weight, {Pkv, Hd}, false);
  c.tensor("v_weight", a.v_weight, {Pkv, Hd}, false);
  c.tensor("o_weight", a.o_weight, {Hd, Pq}, false);
  c.tensor("query_states", a.query_states, {B, Hq, S, D}, false);
  c.tensor("key_states", a.key_states, {B, Hq, S, D}, false);
  c.tensor("value_states", a.value_states, {B, Hq, S, D}, false);
  c.tensor("attn_weights", a.attn_weights, {B, Hq, S, S}, false);
  c.tensor("attn_output", a.attn_output, {B, S, Pq}, false);
  c.tensor("grad_hidden_states", a.grad_hidden_states, {B, S, Hd}, true);
  c.tensor("grad_q_weight", a.grad_q_weight, {Pq, Hd}, true);
  c.tensor("grad_k_weight", a.grad_k_weight, {Pkv, Hd}, true);
  c.tensor("grad_v_weight", a.grad_v_weight, {Pkv, Hd}, true);
  c.tensor("grad_o_weight", a.grad_o_weight, {Hd, Pq}, true);
  c.no_aliasing();
  return s;
}

VisionMhaShape validate(const VisionMhaArgs& a) {
  require_rank("q", a.q, 4);
  require_rank("grad_output", a.grad_output, 3);
  VisionMhaShape s;
  s.batch = a.q.extent[0];
  s.num_heads = a.q.extent[1];
  s.seq_len = a.q.extent[2];
  s.head_dim = a.q.extent[3];
  s.embed_dim = a.grad_output.extent[2];
  positive("q", s.batch, "batch_size");
  positive("q", s.num_heads, "num_heads");
  positive("q", s.seq_len, "seq_len");
  positive("q", s.head_dim, "head_dim");
  if (s.embed_dim != product("q", s.num_heads, s.head_dim))
    throw Error("grad_output", "embed_dim " + std::to_string(s.embed_dim) + " must equal num_heads*head_dim = " +
                                   std::to_string(s.num_heads * s.head_dim));
  finite("scale", a.scale);
  finite("norm_eps", a.norm_eps);
  if (a.norm_eps < 0) throw Error("norm_eps", "must be non-negative");
  const std::int64_t B = s.batch, S = s.seq_len, E = s.embed_dim, H = s.num_heads, D = s.head_dim;
  product("grad_output", 3, E);  // 3E rows of qkv_weight
  Checker c;
  c.tensor("grad_output", a.grad_output, {B, S, E}, false);
  c.tensor("x", a.x, {B, S, E}, false);
  c.tensor("x_mean", a.x_mean, {B, S, 1}, false);
  c.tensor("x_var", a.x_var, {B, S, 1}, false);
  c.tensor("x_norm", a.x_norm, {B, S, E}, false);
  c.tensor("ln_weight", a.ln_weight, {E}, false);
  c.tensor("qkv_weight", a.qkv_weight, {3 * E, E}, false);
  c.tensor("q", a.q, {B, H, S, D}, false);
  c.tensor("k", a.k, {B, H, S, D}, false);
  c.tensor("v", a.v, {B, H, S, D}, false);
  c.tensor("attn_weights", a.attn_weights, {B, H, S, S}, false);
  c.tensor("attn_output", a.attn_output, {B, S, E}, false);
  c.tensor("out_weight", a.out_weight, {E, E}, false);
  c.tensor("grad_x", a.grad_x, {B, S, E}, true);
  c.tensor("grad_qkv_weight", a.grad_qkv_weight, {3 * E, E}, true);
  c.tensor("grad_qkv_bias", a.grad_qkv_bias, {3 * E}, true);
  c.tensor("grad_out_weight", a.grad_out_weight, {E, E}, true);
  c.tensor("grad_out_bias", a.grad_out_bias, {E}, true);
  c.tensor("grad_ln_weight", a.grad_ln_weight, {E}, true);
  c.tensor("grad_ln_bias", a.grad_ln_bias, {E}, true);
  c.no_aliasing();
  return s;
}

namespace detail {

VisionVarlenShape validate_varlen_layout(const VisionVarlenArgs& a) {
  require_rank("grad_output", a.grad_output, 2);
  require_rank("cos", a.cos, 2);
  require_rank("cu_seqlens", a.cu_seqlens, 1);
  VisionVarlenShape s;
  s.total_seq_len = a.grad_output.extent[0];
  s.hidden_size = a.grad_output.extent[1];
  s.head_dim = a.cos.extent[1];
  s.num_sequences = a.cu_seqlens.extent[0] > 0 ? a.cu_seqlens.extent[0] - 1 : 0;
  positive("grad_output", s.total_seq_len, "total_seq_len");
  positive("grad_output", s.hidden_size, "hidden_size");
  positive("cos", s.head_dim, "head_dim");
  even_head_dim("cos", s.head_dim);
  positive("cu_seqlens", s.num_sequences, "num_sequences (length - 1)");
  if (s.hidden_size % s.head_dim != 0)
    throw Error("cos", "head_dim " + std::to_string(s.head_dim) + " must divide hidden_size " +
                           std::to_string(s.hidden_size));
  s.num_heads = s.hidden_size / s.head_dim;
  finite("attention_dropout", a.attention_dropout);
  finite("scaling", a.scaling);
  const std::int64_t S = s.total_seq_len, C = s.hidden_size, D = s.head_dim;
  product("grad_output", 3, C);  // 3C rows of qkv_weight
  Checker c;
  c.tensor("grad_output", a.grad_output, {S, C}, false);
  c.tensor("hidden_states", a.hidden_states, {S, C}, false);
  c.tensor("qkv_weight", a.qkv_weight, {3 * C, C}, false);
  c.tensor("qkv_bias", a.qkv_bias, {3 * C}, false);
  c.tensor("proj_weight", a.proj_weight, {C, C}, false);
  c.tensor("proj_bias", a.proj_bias, {C}, false);
  c.tensor("cos", a.cos, {S, D}, false);
  c.tensor("sin", a.sin, {S, D}, false);
  c.tensor("cu_seqlens", a.cu_seqlens, {s.num_sequences + 1}, false);
  c.tensor("grad_hidden_states", a.grad_hidden_states, {S, C}, true);
  c.tensor("grad_qkv_weight", a.grad_qkv_weight, {3 * C, C}, true);
  c.tensor("grad_qkv_bias", a.grad_qkv_bias, {3 * C}, true);
  c.tensor("grad_proj_weight", a.grad_proj_weight, {C, C}, true);
  c.tensor("grad_proj_bias", a.grad_proj_bias, {C}, true);
  c.no_aliasing();
  return s;
}

void validate_cu_seqlens(const VisionVarlenShape& s, const std::int32_t* cu) {
  const std::int64_t S = s.total_seq_len;
  if (cu[0] != 0) throw Error("cu_seqlens", "must start at 0, got " + std::to_string(cu[0]));
  for (std::int64_t i = 1; i <= s.num_sequences; ++i)
    if (cu[i] < cu[i - 1])
      throw Error("cu_seqlens", "must be non-decreasing: cu_seqlens[" + std::to_string(i) + "] = " +
                                    std::to_string(cu[i]) + " < " + std::to_string(cu[i - 1]));
  if (cu[s.num_sequences] != S)
    throw Error("cu_seqlens", "must end at total_seq_len " + std::to_string(S) + ", got " +
                                  std::to_string(cu[s.num_sequences]));
}

}  // namespace detail

VisionVarlenShape validate(const VisionVarlenArgs& a) {
  const VisionVarlenShape s = detail::validate_varlen_layout(a);
  const std::int32_t* cu = a.memory == Memory::Host ? a.cu_seqlens.data : a.cu_seqlens_host;
  if (cu == nullptr) throw Error("cu_seqlens", "device cu_seqlens needs a host copy (cu_seqlens_host)");
  detail::validate_cu_seqlens(s, cu);
  return s;
}

}  // namespace attnbwd
