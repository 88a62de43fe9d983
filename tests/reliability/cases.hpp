// Argument sets for the reliability tests, built from shape parameters and laid out in one arena:
//   [front slack][tensor 0][guard][tensor 1][guard] ... [tensor n-1][guard][end slack]
// Inputs hold random values, outputs a fill pattern, guards and slack their own pattern, so one
// byte comparison of the whole arena shows whether a call wrote anything (and where), and aliasing
// mutations can point an output anywhere around the tensors without leaving the allocation.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/args.hpp"
#include "common/rng.hpp"

namespace attnbwd::test::rel {

using std::int64_t;

// Number of elements of a rank/extent pair, or -1 when the rank is outside 0..4, an extent is
// negative or the product exceeds `cap` (computed without overflow).
inline int64_t checked_numel(int rank, const int64_t* e, int64_t cap) {
  if (rank < 0 || rank > 4) return -1;
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (e[i] < 0) return -1;
    if (e[i] == 0) return 0;
  }
  for (int i = 0; i < rank; ++i) {
    if (n > cap / e[i]) return -1;
    n *= e[i];
  }
  return n;
}

template <class T>
Tensor<T> shaped(std::initializer_list<int64_t> ext) {
  Tensor<T> t;
  t.rank = static_cast<int>(ext.size());
  int i = 0;
  for (int64_t e : ext) t.extent[i++] = e;
  return t;
}

// The element type behind a tensor's data pointer type.
template <class Pointer>
using Elem = std::remove_const_t<std::remove_pointer_t<Pointer>>;

// ---- shape parameters and argument skeletons (extents and scalars; no data yet) ----------------

struct OutProjParams {
  int64_t B = 1, S = 1, H = 1, D = 1;
};
inline OutProjArgs make_args(const OutProjParams& p) {
  OutProjArgs a;
  const int64_t F = p.H * p.D;
  a.grad_output = shaped<const bf16>({p.B, p.S, F});
  a.reshaped = shaped<const bf16>({p.B, p.S, F});
  a.weight = shaped<const bf16>({F, F});
  a.grad_attn_output = shaped<bf16>({p.B, p.H, p.S, p.D});
  a.grad_weight = shaped<bf16>({F, F});
  return a;
}

struct GqaParams {
  int64_t B = 1, S = 1, Hq = 1, Hkv = 1, D = 2, Hd = 1;
  double scaling = 0.5;
};
inline GqaRopeArgs make_args(const GqaParams& p) {
  GqaRopeArgs a;
  const int64_t Pq = p.Hq * p.D, Pkv = p.Hkv * p.D;
  a.grad_output = shaped<const bf16>({p.B, p.S, p.Hd});
  a.hidden_states = shaped<const bf16>({p.B, p.S, p.Hd});
  a.cos = shaped<const bf16>({p.B, p.S, p.D});
  a.sin = shaped<const bf16>({p.B, p.S, p.D});
  a.q_weight = shaped<const bf16>({Pq, p.Hd});
  a.k_weight = shaped<const bf16>({Pkv, p.Hd});
  a.v_weight = shaped<const bf16>({Pkv, p.Hd});
  a.o_weight = shaped<const bf16>({p.Hd, Pq});
  a.query_states = shaped<const bf16>({p.B, p.Hq, p.S, p.D});
  a.key_states = shaped<const bf16>({p.B, p.Hq, p.S, p.D});
  a.value_states = shaped<const bf16>({p.B, p.Hq, p.S, p.D});
  a.attn_weights = shaped<const bf16>({p.B, p.Hq, p.S, p.S});
  a.attn_output = shaped<const bf16>({p.B, p.S, Pq});
  a.scaling = p.scaling;
  a.grad_hidden_states = shaped<bf16>({p.B, p.S, p.Hd});
  a.grad_q_weight = shaped<bf16>({Pq, p.Hd});
  a.grad_k_weight = shaped<bf16>({Pkv, p.Hd});
  a.grad_v_weight = shaped<bf16>({Pkv, p.Hd});
  a.grad_o_weight = shaped<bf16>({p.Hd, Pq});
  return a;
}

struct MhaParams {
  int64_t B = 1, S = 1, H = 1, D = 1, E = 1;
  double scale = 0.125, norm_eps = 1e-5;
};
inline VisionMhaArgs make_args(const MhaParams& p) {
  VisionMhaArgs a;
  const int64_t E = p.E;
  a.grad_output = shaped<const float>({p.B, p.S, E});
  a.x = shaped<const float>({p.B, p.S, E});
  a.x_mean = shaped<const float>({p.B, p.S, 1});
  a.x_var = shaped<const float>({p.B, p.S, 1});
  a.x_norm = shaped<const float>({p.B, p.S, E});
  a.ln_weight = shaped<const float>({E});
  a.qkv_weight = shaped<const float>({3 * E, E});
  a.q = shaped<const float>({p.B, p.H, p.S, p.D});
  a.k = shaped<const float>({p.B, p.H, p.S, p.D});
  a.v = shaped<const float>({p.B, p.H, p.S, p.D});
  a.attn_weights = shaped<const float>({p.B, p.H, p.S, p.S});
  a.attn_output = shaped<const float>({p.B, p.S, E});
  a.out_weight = shaped<const float>({E, E});
  a.scale = p.scale;
  a.norm_eps = p.norm_eps;
  a.grad_x = shaped<float>({p.B, p.S, E});
  a.grad_qkv_weight = shaped<float>({3 * E, E});
  a.grad_qkv_bias = shaped<float>({3 * E});
  a.grad_out_weight = shaped<float>({E, E});
  a.grad_out_bias = shaped<float>({E});
  a.grad_ln_weight = shaped<float>({E});
  a.grad_ln_bias = shaped<float>({E});
  return a;
}

struct VarlenParams {
  int64_t S = 1, D = 2, C = 2;
  std::vector<std::int32_t> cu{0, 1};  // written into cu_seqlens once it has memory
  double attention_dropout = 0.0, scaling = 0.5;
};
inline VisionVarlenArgs make_args(const VarlenParams& p) {
  VisionVarlenArgs a;
  a.grad_output = shaped<const float>({p.S, p.C});
  a.hidden_states = shaped<const float>({p.S, p.C});
  a.qkv_weight = shaped<const float>({3 * p.C, p.C});
  a.qkv_bias = shaped<const float>({3 * p.C});
  a.proj_weight = shaped<const float>({p.C, p.C});
  a.proj_bias = shaped<const float>({p.C});
  a.cos = shaped<const float>({p.S, p.D});
  a.sin = shaped<const float>({p.S, p.D});
  a.cu_seqlens = shaped<const std::int32_t>({static_cast<int64_t>(p.cu.size())});
  a.attention_dropout = p.attention_dropout;
  a.scaling = p.scaling;
  a.grad_hidden_states = shaped<float>({p.S, p.C});
  a.grad_qkv_weight = shaped<float>({3 * p.C, p.C});
  a.grad_qkv_bias = shaped<float>({3 * p.C});
  a.grad_proj_weight = shaped<float>({p.C, p.C});
  a.grad_proj_bias = shaped<float>({p.C});
  return a;
}

// The op's scalar arguments, by name.
inline std::vector<std::pair<const char*, double*>> scalars(OutProjArgs&) { return {}; }
inline std::vector<std::pair<const char*, double*>> scalars(GqaRopeArgs& a) { return {{"scaling", &a.scaling}}; }
inline std::vector<std::pair<const char*, double*>> scalars(VisionMhaArgs& a) {
  return {{"scale", &a.scale}, {"norm_eps", &a.norm_eps}};
}
inline std::vector<std::pair<const char*, double*>> scalars(VisionVarlenArgs& a) {
  return {{"attention_dropout", &a.attention_dropout}, {"scaling", &a.scaling}};
}

// Every tensor's name, in for_each_tensor order.
template <class Args>
std::vector<std::string> tensor_names(Args a) {
  std::vector<std::string> names;
  detail::for_each_tensor(a, [&](const char* name, auto&, bool) { names.push_back(name); });
  return names;
}

// ---- the arena -----------------------------------------------------------------------------------

class Arena {
 public:
  static constexpr unsigned char kOutputFill = 0xA5;
  static constexpr unsigned char kGuardFill = 0x5A;
  static constexpr std::size_t kGuard = 64;  // bytes after every tensor; tensors start 64-aligned

  struct Region {
    std::string name;
    std::size_t begin = 0, bytes = 0;  // offsets from base()
    bool output = false;
  };

  // Gives every tensor of `a` memory for max(its extents' element count, min_elems[i]) elements
  // (min_elems in for_each_tensor order, may be empty), fills inputs with random normals (bf16 or
  // float; int32 with 0) and outputs with kOutputFill, and points the tensors at it. Extents that do
  // not describe a sane size (negative, rank outside 0..4, more than 2^24 elements) count as 0.
  template <class Args>
  void place(Args& a, std::uint64_t seed, const std::vector<int64_t>& min_elems = {}) {
    Rng rng(seed);
    regions_.clear();
    std::size_t offset = 0, largest = 0, i = 0;
    std::vector<std::size_t> sizes;
    detail::for_each_tensor(a, [&](const char* name, auto& t, bool output) {
      using T = Elem<decltype(t.data)>;
      int64_t n = checked_numel(t.rank, t.extent, int64_t{1} << 24);
      if (n < 0) n = 0;
      if (i < min_elems.size()) n = std::max(n, min_elems[i]);
      ++i;
      const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
      regions_.push_back({name, offset, bytes, output});
      offset = round_up(offset + bytes + kGuard);
      largest = std::max(largest, bytes);
    });
    slack_ = round_up(largest + kGuard);
    const std::size_t total = slack_ + offset + slack_;
    storage_.reset(new unsigned char[total + 64]);
    base_ = storage_.get() + (64 - reinterpret_cast<std::uintptr_t>(storage_.get()) % 64) % 64 + slack_;
    size_ = total;
    std::memset(begin(), kGuardFill, total);
    i = 0;
    detail::for_each_tensor(a, [&](const char*, auto& t, bool output) {
      using T = Elem<decltype(t.data)>;
      const Region& r = regions_[i++];
      T* p = reinterpret_cast<T*>(base_ + r.begin);
      if (output) {
        std::memset(static_cast<void*>(p), kOutputFill, r.bytes);
      } else {
        for (std::size_t k = 0; k < r.bytes / sizeof(T); ++k) {
          if constexpr (std::is_same_v<T, bf16>) p[k] = bf16(static_cast<float>(rng.normal()));
          else if constexpr (std::is_same_v<T, float>) p[k] = static_cast<float>(rng.normal());
          else p[k] = T{};
        }
      }
      t.data = p;
    });
  }

  unsigned char* base() const { return base_; }
  unsigned char* begin() const { return base_ - slack_; }
  std::size_t size() const { return size_; }
  std::size_t slack() const { return slack_; }
  const std::vector<Region>& regions() const { return regions_; }

  std::vector<unsigned char> snapshot() const { return std::vector<unsigned char>(begin(), begin() + size_); }

  // Index (from begin(), as in a snapshot) of the first byte that differs from `snap`: anywhere, or in
  // the input regions only, or outside the output regions only; SIZE_MAX when none does.
  enum class Scope { All, Inputs, NotOutputs };
  std::size_t first_change(const std::vector<unsigned char>& snap, Scope scope = Scope::All) const {
    const unsigned char* now = begin();
    for (std::size_t k = 0; k < size_; ++k) {
      if (now[k] == snap[k]) continue;
      if (scope == Scope::All) return k;
      const Region* r = region_at(k);
      if (scope == Scope::Inputs ? (r && !r->output) : !(r && r->output)) return k;
    }
    return SIZE_MAX;
  }

  // What lies at index k (from begin()): "tensor byte i", "guard bytes after tensor" or "slack".
  std::string where(std::size_t k) const {
    if (k == SIZE_MAX) return "nowhere";
    if (const Region* r = region_at(k)) return r->name + " byte " + std::to_string(k - slack_ - r->begin);
    if (k < slack_) return "slack before the tensors";
    const std::size_t off = k - slack_;
    for (const Region& r : regions_)
      if (off >= r.begin + r.bytes && off < round_up(r.begin + r.bytes + kGuard)) return "guard bytes after " + r.name;
    return "slack after the tensors";
  }

  // The bytes of every output, concatenated in for_each_tensor order.
  std::vector<unsigned char> outputs() const {
    std::vector<unsigned char> out;
    for (const Region& r : regions_)
      if (r.output) out.insert(out.end(), base_ + r.begin, base_ + r.begin + r.bytes);
    return out;
  }

  // Refills every output with `fill` (e.g. 0xFF: NaN in bf16 and float).
  void fill_outputs(unsigned char fill) const {
    for (const Region& r : regions_)
      if (r.output) std::memset(base_ + r.begin, fill, r.bytes);
  }

 private:
  static std::size_t round_up(std::size_t n) { return (n + 63) / 64 * 64; }
  const Region* region_at(std::size_t k) const {
    if (k < slack_) return nullptr;
    const std::size_t off = k - slack_;
    for (const Region& r : regions_)
      if (off >= r.begin && off < r.begin + r.bytes) return &r;
    return nullptr;
  }
  std::unique_ptr<unsigned char[]> storage_;
  unsigned char* base_ = nullptr;
  std::size_t size_ = 0, slack_ = 0;
  std::vector<Region> regions_;
};

// Values the op needs to be meaningful once data is in place: cu_seqlens contents, a positive
// variance for LayerNorm.
inline void finish(OutProjArgs&, const OutProjParams&) {}
inline void finish(GqaRopeArgs&, const GqaParams&) {}
// (Counts come from the parameters, not the extents, which a fuzz case may have changed.)
inline void finish(VisionMhaArgs& a, const MhaParams& p) {
  auto* var = const_cast<float*>(a.x_var.data);
  for (int64_t i = 0; i < p.B * p.S; ++i) var[i] = var[i] * var[i] + 0.1f;
}
inline void finish(VisionVarlenArgs& a, const VarlenParams& p) {
  auto* cu = const_cast<std::int32_t*>(a.cu_seqlens.data);
  for (std::size_t i = 0; i < p.cu.size(); ++i) cu[i] = p.cu[i];
}

// A valid argument set of the given shape, owning its memory.
template <class Params>
struct Case {
  using Args = decltype(make_args(std::declval<Params>()));
  Case(const Params& p, std::uint64_t seed) : params(p), args(make_args(p)) {
    arena.place(args, seed);
    finish(args, params);
  }
  Params params;
  Args args;
  Arena arena;
};

// Small valid shapes with several teams / tiles (tiles are at most 32 rows) and tails.
inline OutProjParams small(OutProjParams) { return {2, 19, 3, 8}; }
inline GqaParams small(GqaParams) { return {2, 37, 4, 2, 8, 24, 0.35}; }
inline MhaParams small(MhaParams) { return {2, 37, 2, 8, 16, 0.35, 1e-5}; }
inline VarlenParams small(VarlenParams) {
  VarlenParams p;
  p.S = 45;
  p.D = 8;
  p.C = 16;
  p.cu = {0, 7, 7, 40, 45};  // an empty sequence and one longer than a tile
  p.scaling = 0.35;
  return p;
}

}  // namespace attnbwd::test::rel
