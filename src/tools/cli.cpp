// attnbwd — the command-line tool: generate benchmark-distributed inputs, run an op on a
// safetensors file, list the ops and workloads. Exit codes: 0 ok, 1 error (attnbwd::Error, I/O),
// 2 usage (unknown command, flag or op, malformed flag value).
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "tools/gen.hpp"
#include "tools/safetensors.hpp"
#include "tools/workloads.hpp"

namespace attnbwd::tools {
namespace {

// ---- usage ---------------------------------------------------------------------------------------

const char* const kUsage = R"(usage: attnbwd <command> [options]

commands:
  gen <op> (--axes k=v,... | --workload <index|uuid>) [--seed N] -o <inputs.safetensors>
        random inputs with the benchmark's distributions
  run <op> -i <inputs.safetensors> -o <outputs.safetensors> [--backend B] [--precision P]
        [--deterministic] [--repeat N]
        run the backward pass on the inputs, write its outputs
  list [op]
        the ops and their benchmark workloads

ops: out_proj_backward, gqa_rope_backward, vision_mha_norm_backward, vision_varlen_rope_backward
'attnbwd <command> --help' describes a command.
)";

const char* const kGenUsage =
    R"(usage: attnbwd gen <op> (--axes k=v,... | --workload <index|uuid>) [--seed N] -o <file>

Writes every input of <op> to a safetensors file, drawn as the benchmark draws them (spec 1.1).
  --axes k=v,...      the variable axes, e.g. batch_size=1,seq_len=256; constant axes may be
                      overridden too (e.g. hidden_size=64 for a small case)
  --workload I        the axes (and scalars) of benchmark workload I: an index 0..15 or a uuid
  --seed N            random seed (default 200, the benchmark's); same seed, same file
  -o, --output FILE   where to write
The file's __metadata__ records op, axes, seed and the workload uuid.
)";

const char* const kRunUsage = R"(usage: attnbwd run <op> -i <inputs> -o <outputs> [options]

Reads the inputs (names, dtypes and shapes as the spec's input table), runs <op> and writes its
outputs (the spec's output names; BF16 for gqa_rope/out_proj, F32 for the vision ops).
  -i, --input FILE       inputs, e.g. from 'attnbwd gen'
  -o, --output FILE      where to write the outputs
  --backend B            auto (default) | serial | portable | cuda
  --precision P          default | strict
  --deterministic        no order-dependent atomics: identical bits on every run
  --repeat N             run N times, report the median and minimum wall time (default 1)
  --kokkos-...           Kokkos runtime options, e.g. --kokkos-threads=8 (Kokkos 3) or
                         --kokkos-num-threads=8 (Kokkos 4)
Prints the backend used, the execution space and the wall time of the call (inputs already in
the execution space's memory; the time ends after a fence).
)";

const char* const kListUsage = R"(usage: attnbwd list [op]

Lists the ops, their benchmark problem folders and workloads (index, uuid, axes, atol, rtol).
Workloads come from $ATTNBWD_SOLEXEC or the folder configured at build time.
)";

// A command-line mistake: reported with a pointer to the help, exit code 2.
struct UsageError : std::runtime_error {
  UsageError(const std::string& what, std::string command)
      : std::runtime_error(what), command(std::move(command)) {}
  std::string command;
};

// ---- flag parsing --------------------------------------------------------------------------------

struct Parsed {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // by long name
  bool help = false;
};

// `value_flags` / `bool_flags` map every accepted spelling to its long name.
Parsed parse_flags(const std::string& command, const std::vector<std::string>& args,
                   const std::map<std::string, std::string>& value_flags,
                   const std::map<std::string, std::string>& bool_flags) {
  Parsed p;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg == "-h" || arg == "--help") {
      p.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      p.positional.push_back(arg);
      continue;
    }
    // Kokkos' own options: left for Kokkos, whose versions spell them differently.
    if (command == "run" && arg.rfind("--kokkos-", 0) == 0) continue;
    std::string inline_value;
    bool has_inline = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline = true;
    }
    if (const auto it = bool_flags.find(arg); it != bool_flags.end()) {
      if (has_inline) throw UsageError(arg + " takes no value", command);
      p.values[it->second] = "1";
    } else if (const auto vt = value_flags.find(arg); vt != value_flags.end()) {
      if (!has_inline && i + 1 >= args.size()) throw UsageError(arg + " needs a value", command);
      if (p.values.count(vt->second)) throw UsageError(arg + " given twice", command);
      p.values[vt->second] = has_inline ? inline_value : args[++i];
    } else {
      throw UsageError("unknown option " + arg, command);
    }
  }
  return p;
}

std::string require_op(const Parsed& p, const std::string& command) {
  if (p.positional.empty()) throw UsageError("missing <op>", command);
  if (p.positional.size() > 1) throw UsageError("unexpected argument " + p.positional[1], command);
  const std::string& op = p.positional[0];
  if (std::find(op_names().begin(), op_names().end(), op) == op_names().end())
    throw UsageError("unknown op \"" + op + "\"", command);
  return op;
}

std::string require(const Parsed& p, const std::string& flag, const std::string& command) {
  const auto it = p.values.find(flag);
  if (it == p.values.end() || it->second.empty()) throw UsageError("missing " + flag, command);
  return it->second;
}

std::uint64_t parse_unsigned(const std::string& text, const std::string& flag, const std::string& command) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError(flag + " expects a non-negative integer, got \"" + text + "\"", command);
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    throw UsageError(flag + " value \"" + text + "\" is out of range", command);
  }
}

// A flag taking one of a few named values (the first is the default); returns the name given.
template <class T>
std::string one_of(const Parsed& p, const std::string& flag, const std::vector<std::pair<std::string, T>>& choices,
                   T& out) {
  const auto it = p.values.find(flag);
  const std::string name = it == p.values.end() ? choices.front().first : it->second;
  std::string names;
  for (const auto& [n, value] : choices) {
    if (n == name) return out = value, name;
    names += (names.empty() ? "" : ", ") + n;
  }
  throw UsageError(flag + " must be one of " + names + "; got \"" + name + "\"", "run");
}

// ---- gen -----------------------------------------------------------------------------------------

int cmd_gen(const std::vector<std::string>& args) {
  const Parsed p = parse_flags("gen", args,
                               {{"--axes", "--axes"},
                                {"--workload", "--workload"},
                                {"--seed", "--seed"},
                                {"-o", "--output"},
                                {"--output", "--output"}},
                               {});
  if (p.help) return std::fputs(kGenUsage, stdout), 0;
  const std::string op = require_op(p, "gen");
  const std::string out_path = require(p, "--output", "gen");
  const bool by_axes = p.values.count("--axes"), by_workload = p.values.count("--workload");
  if (by_axes == by_workload) throw UsageError("give exactly one of --axes and --workload", "gen");
  const std::uint64_t seed =
      p.values.count("--seed") ? parse_unsigned(p.values.at("--seed"), "--seed", "gen") : 200;

  Axes axes;
  std::map<std::string, double> scalars;
  Metadata meta{{"op", op}, {"seed", std::to_string(seed)}, {"generator", "attnbwd gen"}};
  if (by_workload) {
    const auto workloads = load_workloads(op);
    const Workload& w = find_workload(workloads, p.values.at("--workload"));
    axes = w.axes;
    scalars = w.scalars;
    meta["workload_uuid"] = w.uuid;
    meta["workload_index"] = std::to_string(w.index);
  } else {
    try {
      axes = axes_from_string(p.values.at("--axes"));
    } catch (const Error& e) {
      throw UsageError(e.what(), "gen");
    }
  }
  meta["axes"] = axes_to_string(load_definition(op).resolve_axes(axes));

  const auto t0 = std::chrono::steady_clock::now();
  const TensorSet inputs = generate_inputs(op, axes, seed, scalars);
  write_safetensors(out_path, inputs, meta);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::size_t bytes = 0;
  for (const auto& entry : inputs) bytes += entry.second.bytes.size();
  std::printf("%s: wrote %s (%zu tensors, %.1f MB; %s, seed %llu) in %.2f s\n", op.c_str(), out_path.c_str(),
              inputs.size(), bytes / 1e6, meta.at("axes").c_str(), static_cast<unsigned long long>(seed),
              seconds);
  return 0;
}

// ---- list ----------------------------------------------------------------------------------------

int cmd_list(const std::vector<std::string>& args) {
  const Parsed p = parse_flags("list", args, {}, {});
  if (p.help) return std::fputs(kListUsage, stdout), 0;
  std::vector<std::string> ops = op_names();
  if (!p.positional.empty()) ops = {require_op(p, "list")};
  std::printf("solexec folder: %s\n", solexec_dir().empty() ? "(none)" : solexec_dir().c_str());
  int rc = 0;
  for (const std::string& op : ops) {
    std::printf("\n%s  (%s)\n", op.c_str(), problem_dir(op).c_str());
    try {
      for (const Workload& w : load_workloads(op))
        std::printf("  %2d  %s  %-34s atol=%g rtol=%g\n", w.index, w.uuid.c_str(),
                    axes_to_string(w.axes).c_str(), w.atol, w.rtol);
    } catch (const Error& e) {
      std::fprintf(stderr, "attnbwd: workloads unavailable: %s\n", e.what());
      rc = 1;
    }
  }
  return rc;
}

// ---- run: host tensors <-> Views -----------------------------------------------------------------

// Rank and element type of a Kokkos data type such as `const bf16***`.
template <class T>
struct data_rank : std::integral_constant<int, 0> {};
template <class T>
struct data_rank<T*> : std::integral_constant<int, 1 + data_rank<T>::value> {};
template <class T>
struct data_value {
  using type = T;
};
template <class T>
struct data_value<T*> {
  using type = typename data_value<T>::type;
};

template <class DataType>
using HostView = Kokkos::View<DataType, Kokkos::LayoutRight, Kokkos::HostSpace>;

// An unmanaged host View over a tensor's bytes (checks the dtype; the shape was checked by expect).
template <class DataType, class Tensor>
HostView<DataType> wrap(Tensor& t) {
  using Elem = std::remove_const_t<typename data_value<DataType>::type>;
  auto* p = t.template data<Elem>();
  const auto e = [&](int i) { return static_cast<std::size_t>(t.shape.at(i)); };
  constexpr int rank = data_rank<DataType>::value;
  if constexpr (rank == 1)
    return HostView<DataType>(p, e(0));
  else if constexpr (rank == 2)
    return HostView<DataType>(p, e(0), e(1));
  else if constexpr (rank == 3)
    return HostView<DataType>(p, e(0), e(1), e(2));
  else
    return HostView<DataType>(p, e(0), e(1), e(2), e(3));
}

// Puts inputs and outputs in the memory space `Mem`: no copies when it is the host's, else device
// copies of the inputs and device outputs copied back by copy_back().
template <class Mem>
class Staging {
 public:
  template <class DataType>
  detail::View<DataType, Mem> input(const HostTensor& t) {
    return Kokkos::create_mirror_view_and_copy(Mem(), wrap<DataType>(t));
  }
  template <class DataType>
  detail::View<DataType, Mem> output(HostTensor& t) {
    const HostView<DataType> host = wrap<DataType>(t);
    const auto staged = Kokkos::create_mirror_view(Mem(), host);
    // On a host space the mirror is `host` itself: no copy (Kokkos 5.2 rejects a deep_copy of a View
    // onto itself).
    if (staged.data() != host.data()) copy_back_.push_back([host, staged] { Kokkos::deep_copy(host, staged); });
    return staged;
  }
  void copy_back() {
    for (auto& f : copy_back_) f();
  }

 private:
  std::vector<std::function<void()>> copy_back_;
};

struct RunConfig {
  Options opts;
  int repeat = 1;
  Axes file_axes;  // from the input file's metadata, when present
};

struct RunReport {
  std::string backend, exec_space;
  std::vector<double> ms;
};

// Times `call` on `exec` (fenced before and after) cfg.repeat times.
template <class Exec, class F>
void time_runs(const Exec& exec, const RunConfig& cfg, RunReport& rep, F&& call) {
  rep.exec_space = Exec::name();
  for (int r = 0; r < cfg.repeat; ++r) {
    exec.fence();
    const auto t0 = std::chrono::steady_clock::now();
    rep.backend = to_string(call());
    exec.fence();
    rep.ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
}

// Rejects tensors the op does not take: usually a file made for another op.
void expect_only(const TensorSet& in, const std::string& op, std::initializer_list<const char*> names) {
  for (const auto& entry : in) {
    if (std::none_of(names.begin(), names.end(), [&](const char* n) { return entry.first == n; })) {
      std::string list;
      for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
      throw Error(entry.first, "unexpected tensor: " + op + " takes " + list);
    }
  }
}

// ---- run: one function per op ---------------------------------------------------------------------

template <class Exec>
TensorSet run_out_proj(const Exec& exec, const TensorSet& in, const RunConfig& cfg, RunReport& rep) {
  using Mem = typename Exec::memory_space;
  expect_only(in, "out_proj_backward", {"grad_output", "reshaped", "weight"});
  const auto& dy = expect_rank(in, "grad_output", DType::BF16, 3);
  const std::int64_t B = dy.shape[0], S = dy.shape[1], hidden = dy.shape[2];
  // The head split is not visible in the inputs: from the file's axes, else the benchmark's 32.
  const std::int64_t heads = cfg.file_axes.count("num_heads") ? cfg.file_axes.at("num_heads") : 32;
  if (heads < 1 || hidden % heads != 0)
    throw Error("num_heads",
                std::to_string(heads) + " does not divide hidden size " + std::to_string(hidden));

  Staging<Mem> st;
  OutProjInputs<Mem> vi;
  vi.grad_output = st.template input<const bf16***>(dy);
  vi.reshaped = st.template input<const bf16***>(expect(in, "reshaped", DType::BF16, {B, S, hidden}));
  vi.weight = st.template input<const bf16**>(expect(in, "weight", DType::BF16, {hidden, hidden}));

  TensorSet out;
  OutProjOutputs<Mem> vo;
  vo.grad_attn_output = st.template output<bf16****>(
      out.add("grad_attn_output", HostTensor::zeros(DType::BF16, {B, heads, S, hidden / heads})));
  vo.grad_weight =
      st.template output<bf16**>(out.add("grad_weight", HostTensor::zeros(DType::BF16, {hidden, hidden})));

  time_runs(exec, cfg, rep, [&] { return out_proj_backward(exec, vi, vo, cfg.opts); });
  st.copy_back();
  return out;
}

template <class Exec>
TensorSet run_gqa_rope(const Exec& exec, const TensorSet& in, const RunConfig& cfg, RunReport& rep) {
  using Mem = typename Exec::memory_space;
  expect_only(in, "gqa_rope_backward",
              {"grad_output", "hidden_states", "cos", "sin", "q_weight", "k_weight", "v_weight", "o_weight",
               "query_states", "key_states", "value_states", "attn_weights", "attn_output", "scaling"});
  const auto& dy = expect_rank(in, "grad_output", DType::BF16, 3);
  const std::int64_t B = dy.shape[0], S = dy.shape[1], hidden = dy.shape[2];
  const auto& q = expect_rank(in, "query_states", DType::BF16, 4);
  const std::int64_t Hq = q.shape[1], D = q.shape[3], qp = Hq * D;
  const std::int64_t kvp = expect_rank(in, "k_weight", DType::BF16, 2).shape[0];

  Staging<Mem> st;
  GqaRopeInputs<Mem> vi;
  vi.grad_output = st.template input<const bf16***>(dy);
  vi.hidden_states =
      st.template input<const bf16***>(expect(in, "hidden_states", DType::BF16, {B, S, hidden}));
  vi.cos = st.template input<const bf16***>(expect(in, "cos", DType::BF16, {B, S, D}));
  vi.sin = st.template input<const bf16***>(expect(in, "sin", DType::BF16, {B, S, D}));
  vi.q_weight = st.template input<const bf16**>(expect(in, "q_weight", DType::BF16, {qp, hidden}));
  vi.k_weight = st.template input<const bf16**>(expect(in, "k_weight", DType::BF16, {kvp, hidden}));
  vi.v_weight = st.template input<const bf16**>(expect(in, "v_weight", DType::BF16, {kvp, hidden}));
  vi.o_weight = st.template input<const bf16**>(expect(in, "o_weight", DType::BF16, {hidden, qp}));
  vi.query_states = st.template input<const bf16****>(expect(in, "query_states", DType::BF16, {B, Hq, S, D}));
  vi.key_states = st.template input<const bf16****>(expect(in, "key_states", DType::BF16, {B, Hq, S, D}));
  vi.value_states = st.template input<const bf16****>(expect(in, "value_states", DType::BF16, {B, Hq, S, D}));
  vi.attn_weights = st.template input<const bf16****>(expect(in, "attn_weights", DType::BF16, {B, Hq, S, S}));
  vi.attn_output = st.template input<const bf16***>(expect(in, "attn_output", DType::BF16, {B, S, qp}));
  vi.scaling = scalar(in, "scaling");

  TensorSet out;
  GqaRopeOutputs<Mem> vo;
  auto add = [&](const char* name, std::vector<std::int64_t> shape) -> HostTensor& {
    return out.add(name, HostTensor::zeros(DType::BF16, std::move(shape)));
  };
  vo.grad_hidden_states = st.template output<bf16***>(add("grad_hidden_states", {B, S, hidden}));
  vo.grad_q_weight = st.template output<bf16**>(add("grad_q_weight", {qp, hidden}));
  vo.grad_k_weight = st.template output<bf16**>(add("grad_k_weight", {kvp, hidden}));
  vo.grad_v_weight = st.template output<bf16**>(add("grad_v_weight", {kvp, hidden}));
  vo.grad_o_weight = st.template output<bf16**>(add("grad_o_weight", {hidden, qp}));

  time_runs(exec, cfg, rep, [&] { return gqa_rope_backward(exec, vi, vo, cfg.opts); });
  st.copy_back();
  return out;
}

template <class Exec>
TensorSet run_vision_mha(const Exec& exec, const TensorSet& in, const RunConfig& cfg, RunReport& rep) {
  using Mem = typename Exec::memory_space;
  expect_only(in, "vision_mha_norm_backward",
              {"grad_output", "x", "x_mean", "x_var", "x_norm", "ln_weight", "qkv_weight", "q", "k", "v",
               "attn_weights", "attn_output", "out_weight", "scale", "norm_eps"});
  const auto& dy = expect_rank(in, "grad_output", DType::F32, 3);
  const std::int64_t B = dy.shape[0], S = dy.shape[1], E = dy.shape[2];
  const auto& q = expect_rank(in, "q", DType::F32, 4);
  const std::int64_t H = q.shape[1], D = q.shape[3];

  Staging<Mem> st;
  VisionMhaInputs<Mem> vi;
  vi.grad_output = st.template input<const float***>(dy);
  vi.x = st.template input<const float***>(expect(in, "x", DType::F32, {B, S, E}));
  vi.x_mean = st.template input<const float***>(expect(in, "x_mean", DType::F32, {B, S, 1}));
  vi.x_var = st.template input<const float***>(expect(in, "x_var", DType::F32, {B, S, 1}));
  vi.x_norm = st.template input<const float***>(expect(in, "x_norm", DType::F32, {B, S, E}));
  vi.ln_weight = st.template input<const float*>(expect(in, "ln_weight", DType::F32, {E}));
  vi.qkv_weight = st.template input<const float**>(expect(in, "qkv_weight", DType::F32, {3 * E, E}));
  vi.q = st.template input<const float****>(expect(in, "q", DType::F32, {B, H, S, D}));
  vi.k = st.template input<const float****>(expect(in, "k", DType::F32, {B, H, S, D}));
  vi.v = st.template input<const float****>(expect(in, "v", DType::F32, {B, H, S, D}));
  vi.attn_weights = st.template input<const float****>(expect(in, "attn_weights", DType::F32, {B, H, S, S}));
  vi.attn_output = st.template input<const float***>(expect(in, "attn_output", DType::F32, {B, S, E}));
  vi.out_weight = st.template input<const float**>(expect(in, "out_weight", DType::F32, {E, E}));
  vi.scale = scalar(in, "scale");
  vi.norm_eps = scalar(in, "norm_eps");

  TensorSet out;
  VisionMhaOutputs<Mem> vo;
  auto add = [&](const char* name, std::vector<std::int64_t> shape) -> HostTensor& {
    return out.add(name, HostTensor::zeros(DType::F32, std::move(shape)));
  };
  vo.grad_x = st.template output<float***>(add("grad_x", {B, S, E}));
  vo.grad_qkv_weight = st.template output<float**>(add("grad_qkv_weight", {3 * E, E}));
  vo.grad_qkv_bias = st.template output<float*>(add("grad_qkv_bias", {3 * E}));
  vo.grad_out_weight = st.template output<float**>(add("grad_out_weight", {E, E}));
  vo.grad_out_bias = st.template output<float*>(add("grad_out_bias", {E}));
  vo.grad_ln_weight = st.template output<float*>(add("grad_ln_weight", {E}));
  vo.grad_ln_bias = st.template output<float*>(add("grad_ln_bias", {E}));

  time_runs(exec, cfg, rep, [&] { return vision_mha_norm_backward(exec, vi, vo, cfg.opts); });
  st.copy_back();
  return out;
}

template <class Exec>
TensorSet run_vision_varlen(const Exec& exec, const TensorSet& in, const RunConfig& cfg, RunReport& rep) {
  using Mem = typename Exec::memory_space;
  expect_only(in, "vision_varlen_rope_backward",
              {"grad_output", "hidden_states", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "cos",
               "sin", "cu_seqlens", "attention_dropout", "scaling"});
  const auto& dy = expect_rank(in, "grad_output", DType::F32, 2);
  const std::int64_t S = dy.shape[0], C = dy.shape[1];
  const std::int64_t D = expect_rank(in, "cos", DType::F32, 2).shape[1];
  const auto& cu = expect_rank(in, "cu_seqlens", DType::I32, 1);

  Staging<Mem> st;
  VisionVarlenInputs<Mem> vi;
  vi.grad_output = st.template input<const float**>(dy);
  vi.hidden_states = st.template input<const float**>(expect(in, "hidden_states", DType::F32, {S, C}));
  vi.qkv_weight = st.template input<const float**>(expect(in, "qkv_weight", DType::F32, {3 * C, C}));
  vi.qkv_bias = st.template input<const float*>(expect(in, "qkv_bias", DType::F32, {3 * C}));
  vi.proj_weight = st.template input<const float**>(expect(in, "proj_weight", DType::F32, {C, C}));
  vi.proj_bias = st.template input<const float*>(expect(in, "proj_bias", DType::F32, {C}));
  vi.cos = st.template input<const float**>(expect(in, "cos", DType::F32, {S, D}));
  vi.sin = st.template input<const float**>(expect(in, "sin", DType::F32, {S, D}));
  vi.cu_seqlens = st.template input<const std::int32_t*>(cu);
  vi.cu_seqlens_host = wrap<const std::int32_t*>(cu);  // spares the call a device->host copy
  vi.attention_dropout = scalar(in, "attention_dropout");
  vi.scaling = scalar(in, "scaling");

  TensorSet out;
  VisionVarlenOutputs<Mem> vo;
  auto add = [&](const char* name, std::vector<std::int64_t> shape) -> HostTensor& {
    return out.add(name, HostTensor::zeros(DType::F32, std::move(shape)));
  };
  vo.grad_hidden_states = st.template output<float**>(add("grad_hidden_states", {S, C}));
  vo.grad_qkv_weight = st.template output<float**>(add("grad_qkv_weight", {3 * C, C}));
  vo.grad_qkv_bias = st.template output<float*>(add("grad_qkv_bias", {3 * C}));
  vo.grad_proj_weight = st.template output<float**>(add("grad_proj_weight", {C, C}));
  vo.grad_proj_bias = st.template output<float*>(add("grad_proj_bias", {C}));

  time_runs(exec, cfg, rep, [&] { return vision_varlen_rope_backward(exec, vi, vo, cfg.opts); });
  st.copy_back();
  return out;
}

template <class Exec>
TensorSet run_op(const std::string& op, const TensorSet& in, const RunConfig& cfg, RunReport& rep) {
  const Exec exec;
  if (op == "out_proj_backward") return run_out_proj(exec, in, cfg, rep);
  if (op == "gqa_rope_backward") return run_gqa_rope(exec, in, cfg, rep);
  if (op == "vision_mha_norm_backward") return run_vision_mha(exec, in, cfg, rep);
  return run_vision_varlen(exec, in, cfg, rep);
}

// ---- run -----------------------------------------------------------------------------------------

int cmd_run(const std::vector<std::string>& args) {
  const Parsed p = parse_flags("run", args,
                               {{"-i", "--input"},
                                {"--input", "--input"},
                                {"-o", "--output"},
                                {"--output", "--output"},
                                {"--backend", "--backend"},
                                {"--precision", "--precision"},
                                {"--repeat", "--repeat"}},
                               {{"--deterministic", "--deterministic"}});
  if (p.help) return std::fputs(kRunUsage, stdout), 0;
  const std::string op = require_op(p, "run");
  const std::string in_path = require(p, "--input", "run");
  const std::string out_path = require(p, "--output", "run");

  RunConfig cfg;
  const std::string backend = one_of<Backend>(
      p, "--backend",
      {{"auto", Backend::Auto}, {"serial", Backend::Serial}, {"portable", Backend::Portable}, {"cuda", Backend::Cuda}},
      cfg.opts.backend);
  const std::string precision = one_of<Precision>(
      p, "--precision", {{"default", Precision::Default}, {"strict", Precision::Strict}}, cfg.opts.precision);
  cfg.opts.deterministic = p.values.count("--deterministic") > 0;
  if (p.values.count("--repeat")) {
    const std::uint64_t n = parse_unsigned(p.values.at("--repeat"), "--repeat", "run");
    if (n < 1 || n > 1000000) throw UsageError("--repeat must be in 1..1000000", "run");
    cfg.repeat = static_cast<int>(n);
  }

  Metadata in_meta;
  const TensorSet inputs = read_safetensors(in_path, &in_meta);
  if (in_meta.count("op") && in_meta.at("op") != op)
    throw Error(in_path, "holds inputs of " + in_meta.at("op") + ", not " + op);
  if (in_meta.count("axes")) cfg.file_axes = axes_from_string(in_meta.at("axes"));

  // Serial runs the host oracle on the host buffers directly; the other backends use the default
  // execution space, staging through its memory when that is not the host's.
  constexpr bool device_build =
      !Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible;
  const bool on_host = cfg.opts.backend == Backend::Serial || !device_build;
  RunReport rep;
  const TensorSet outputs = on_host ? run_op<Kokkos::DefaultHostExecutionSpace>(op, inputs, cfg, rep)
                                    : run_op<Kokkos::DefaultExecutionSpace>(op, inputs, cfg, rep);

  std::vector<double> sorted = rep.ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  char time_text[128];
  if (sorted.size() == 1) {
    std::snprintf(time_text, sizeof time_text, "%.3f ms", median);
  } else {
    std::snprintf(time_text, sizeof time_text, "median %.3f ms, min %.3f ms over %zu runs", median, sorted[0],
                  sorted.size());
  }

  const Metadata out_meta{{"op", op},
                          {"backend", rep.backend},
                          {"exec_space", rep.exec_space},
                          {"precision", precision},
                          {"deterministic", cfg.opts.deterministic ? "true" : "false"},
                          {"input", in_path},
                          {"wall_ms", std::to_string(median)}};
  write_safetensors(out_path, outputs, out_meta);
  std::printf("%s: backend %s on %s, %s\nwrote %s (%zu tensors)\n", op.c_str(), rep.backend.c_str(),
              rep.exec_space.c_str(), time_text, out_path.c_str(), outputs.size());
  return 0;
}

// ---- main ----------------------------------------------------------------------------------------

bool wants_help(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "-h" || a == "--help"; });
}

int dispatch(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  const std::string command = argv[1];
  if (command == "-h" || command == "--help" || command == "help") return std::fputs(kUsage, stdout), 0;
  if (command == "run" && !wants_help({argv + 2, argv + argc})) {
    // Kokkos takes its own --kokkos-* options out of argv (it also answers --help, hence the check).
    Kokkos::ScopeGuard kokkos(argc, argv);
    return cmd_run({argv + 2, argv + argc});
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "run") return cmd_run(args);  // only --help gets here
  if (command == "gen") return cmd_gen(args);
  if (command == "list") return cmd_list(args);
  throw UsageError("unknown command \"" + command + "\"", "");
}

}  // namespace
}  // namespace attnbwd::tools

int main(int argc, char** argv) {
  using attnbwd::tools::UsageError;
  try {
    return attnbwd::tools::dispatch(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "attnbwd: %s\nRun 'attnbwd %s%s--help' for usage.\n", e.what(), e.command.c_str(),
                 e.command.empty() ? "" : " ");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnbwd: error: %s\n", e.what());
    return 1;
  }
}
