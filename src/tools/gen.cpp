#include "tools/gen.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>
#include <vector>

#include "common/rng.hpp"

namespace attnbwd::tools {

namespace {

constexpr float kPi = 3.14159265358979323846f;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

DType dtype_from_definition(const TensorDef& t) {
  if (t.dtype == "bfloat16") return DType::BF16;
  if (t.dtype == "float32") return DType::F32;
  if (t.dtype == "float64") return DType::F64;
  if (t.dtype == "int32") return DType::I32;
  throw Error(t.name, "unsupported dtype \"" + t.dtype + "\" in the definition");
}

// A float value as the tensor's dtype holds it: how torch ops "computed in the target dtype" round
// their intermediates.
float round_to(DType d, float v) { return d == DType::BF16 ? bf16(v).to_float() : v; }

// Threads for drawing: ATTNBWD_GEN_THREADS if set (>= 1), else the hardware's, at most 64. The bytes
// drawn never depend on it (see fill_rows).
int gen_threads() {
  if (const char* v = std::getenv("ATTNBWD_GEN_THREADS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1 || n > 1024)
      throw Error("ATTNBWD_GEN_THREADS", std::string("expected a thread count in [1, 1024], got \"") + v + "\"");
    return static_cast<int>(n);
  }
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 64u));
}

std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Fills a floating tensor row by row: `row(float* out, n, rng)` writes one row of the last dimension in
// float from `rng`; it lands in the tensor's dtype with one rounding. A row keeps softmax
// self-contained. Rows are drawn in chunks of whole rows (at least kChunk elements); chunk c draws from
// its own Rng seeded by (tensor_seed, c), and the chunks are spread over gen_threads() threads, so the
// bytes depend on the seed alone (a large workload's inputs draw ~10x faster on 16 cores).
constexpr std::int64_t kChunk = std::int64_t{1} << 16;

template <class RowFn>
void fill_rows(HostTensor& t, std::uint64_t tensor_seed, RowFn row) {
  if (t.dtype != DType::F32 && t.dtype != DType::BF16 && t.dtype != DType::F64)
    throw Error("tensor of dtype I32 cannot be drawn from a float distribution");
  const std::int64_t numel = t.numel();
  const std::int64_t len = t.shape.empty() ? 1 : std::max<std::int64_t>(t.shape.back(), 1);
  const std::int64_t rows = numel / len;
  if (rows == 0) return;
  const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, kChunk / len);
  const std::int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  const auto draw = [&](std::int64_t first, std::int64_t step) {
    std::vector<float> scratch(t.dtype == DType::F32 ? 0 : static_cast<std::size_t>(len));
    for (std::int64_t c = first; c < chunks; c += step) {
      Rng rng(mix64(tensor_seed ^ mix64(static_cast<std::uint64_t>(c) + 1)));
      const std::int64_t r1 = std::min(rows, (c + 1) * rows_per_chunk);
      for (std::int64_t r = c * rows_per_chunk; r < r1; ++r) {
        const std::int64_t start = r * len;
        if (t.dtype == DType::F32) {
          row(t.data<float>() + start, len, rng);
        } else if (t.dtype == DType::BF16) {
          row(scratch.data(), len, rng);
          bf16* out = t.data<bf16>() + start;
          for (std::int64_t i = 0; i < len; ++i) out[i] = bf16(scratch[i]);
        } else {
          row(scratch.data(), len, rng);
          double* out = t.data<double>() + start;
          for (std::int64_t i = 0; i < len; ++i) out[i] = scratch[i];
        }
      }
    }
  };
  const int threads = static_cast<int>(std::min<std::int64_t>(gen_threads(), chunks));
  if (threads <= 1) return draw(0, 1);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) pool.emplace_back(draw, i, threads);
  draw(0, threads);
  for (std::thread& th : pool) th.join();
}

void fill_scaled_normal(HostTensor& t, std::uint64_t seed, float scale) {
  fill_rows(t, seed, [scale](float* out, std::int64_t n, Rng& rng) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rng.normal()) * scale;
  });
}

void fill_normal(HostTensor& t, std::uint64_t seed) {
  fill_rows(t, seed, [](float* out, std::int64_t n, Rng& rng) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(rng.normal());
  });
}

// The "random" rules of spec §1.1 that can match this library's names, in the harness's order.
// (The norm weight/bias, mask and SSM-decay rules match none of them and are left out.)
void fill_random(HostTensor& t, const std::string& name, std::uint64_t seed) {
  const DType d = t.dtype;
  if (name == "cos" || name == "sin") {
    const bool is_cos = name == "cos";
    fill_rows(t, seed, [is_cos](float* out, std::int64_t n, Rng& rng) {
      for (std::int64_t i = 0; i < n; ++i) {
        const float x = std::clamp(static_cast<float>(rng.normal()), -kPi, kPi);
        out[i] = is_cos ? std::cos(x) : std::sin(x);
      }
    });
    return;
  }
  const bool positive = name == "var" || name == "std" || name == "rstd" || name == "variance" ||
                        ends_with(name, "_var") || ends_with(name, "_std") || ends_with(name, "_rstd") ||
                        ends_with(name, "_variance");
  if (positive) {  // |randn| + 0.1 in the target dtype
    fill_rows(t, seed, [d](float* out, std::int64_t n, Rng& rng) {
      for (std::int64_t i = 0; i < n; ++i)
        out[i] = std::fabs(round_to(d, static_cast<float>(rng.normal()))) + 0.1f;
    });
    return;
  }
  if (name == "attn_weights" || name == "attention_weights" || name == "routing_weights") {
    fill_rows(t, seed, [](float* out, std::int64_t n, Rng& rng) {  // softmax of fp32 normals over the last dim
      float max = -std::numeric_limits<float>::infinity();
      for (std::int64_t i = 0; i < n; ++i) max = std::max(max, out[i] = static_cast<float>(rng.normal()));
      double sum = 0.0;
      for (std::int64_t i = 0; i < n; ++i) sum += out[i] = std::exp(out[i] - max);
      const float inv = static_cast<float>(1.0 / sum);
      for (std::int64_t i = 0; i < n; ++i) out[i] *= inv;
    });
    return;
  }
  const bool weight_matrix =
      t.shape.size() >= 2 && (name == "weight" || ends_with(name, "_weight") || ends_with(name, "_proj"));
  if (weight_matrix) {  // randn(dtype) / sqrt(shape[-1]), the divide done in the dtype
    const float root = static_cast<float>(std::sqrt(static_cast<double>(t.shape.back())));
    fill_rows(t, seed, [d, root](float* out, std::int64_t n, Rng& rng) {
      for (std::int64_t i = 0; i < n; ++i) out[i] = round_to(d, static_cast<float>(rng.normal())) / root;
    });
    return;
  }
  fill_normal(t, seed);  // ln_weight (1-D) lands here too: plain N(0,1), as in the harness
}

// Problem 017's get_inputs (spec §5).
void fill_custom_017(TensorSet& set, const TensorDef& def, HostTensor t, const Axes& axes, std::uint64_t seed) {
  const std::string& n = def.name;
  if (n == "grad_output" || n == "hidden_states" || n == "cos" || n == "sin") {
    fill_normal(t, seed);  // plain N(0,1), cos/sin included: not real cosines
  } else if (n == "qkv_weight" || n == "proj_weight") {
    fill_scaled_normal(t, seed, 0.02f);
  } else if (n == "qkv_bias" || n == "proj_bias") {
    fill_scaled_normal(t, seed, 0.01f);
  } else if (n == "cu_seqlens") {
    const auto cu = even_cu_seqlens(axes.at("total_seq_len"), axes.at("num_sequences"));
    if (t.dtype != DType::I32 || t.numel() != static_cast<std::int64_t>(cu.size()))
      throw Error(n, "definition does not describe an int32 [num_sequences+1] tensor");
    std::copy(cu.begin(), cu.end(), t.data<std::int32_t>());
  } else if (n == "attention_dropout") {
    t = make_scalar(0.0);
  } else if (n == "scaling") {
    t = make_scalar(std::pow(static_cast<double>(axes.at("head_dim")), -0.5));  // head_dim ** -0.5
  } else {
    throw Error(n, "no custom generator for this input");
  }
  set.add(n, std::move(t));
}

}  // namespace

std::map<std::string, double> default_scalars(const std::string& op) {
  problem_dir(op);  // rejects unknown ops
  if (op == "gqa_rope_backward") return {{"scaling", 0.08838834764831845}};
  if (op == "vision_mha_norm_backward") return {{"scale", 0.125}, {"norm_eps", 1e-5}};
  return {};
}

std::vector<std::int32_t> even_cu_seqlens(std::int64_t total, std::int64_t n) {
  if (n < 1) throw Error("num_sequences", "must be at least 1");
  if (total < 0 || total > std::numeric_limits<std::int32_t>::max())
    throw Error("total_seq_len", "must be in [0, 2^31)");
  std::vector<std::int32_t> cu(static_cast<std::size_t>(n) + 1, 0);
  const std::int64_t base = total / n, extra = total % n;
  for (std::int64_t i = 0; i < n; ++i)
    cu[i + 1] = static_cast<std::int32_t>(cu[i] + base + (i < extra ? 1 : 0));
  return cu;
}

TensorSet generate_inputs(const std::string& op, const Axes& given, std::uint64_t seed) {
  return generate_inputs(op, given, seed, {});
}

TensorSet generate_inputs(const std::string& op, const Axes& given, std::uint64_t seed,
                          const std::map<std::string, double>& scalar_overrides) {
  const Definition def = load_definition(op);
  const Axes axes = def.resolve_axes(given);
  std::map<std::string, double> scalars = default_scalars(op);
  for (const auto& [name, value] : scalar_overrides) scalars[name] = value;

  Rng rng(seed);  // one draw per input (definition order): the seed of that input's chunks
  TensorSet set;
  for (const TensorDef& in : def.inputs) {
    const std::uint64_t tensor_seed = rng.next();
    HostTensor t = in.is_scalar ? make_scalar(0.0)
                                : HostTensor::zeros(dtype_from_definition(in), def.shape_of(in, axes));
    if (def.custom_inputs) {
      fill_custom_017(set, in, std::move(t), axes, tensor_seed);
      continue;
    }
    if (in.is_scalar) {
      const auto it = scalars.find(in.name);
      if (it == scalars.end()) throw Error(in.name, "no value for scalar input");
      t = make_scalar(it->second);
    } else {
      fill_random(t, in.name, tensor_seed);
    }
    set.add(in.name, std::move(t));
  }
  return set;
}

}  // namespace attnbwd::tools
