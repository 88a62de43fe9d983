// attnbwd_perf — the Google Benchmark suite: one benchmark per (op, workload, backend) over the
// workload files in shared/solexec, timed as spec §7 does and measured against the spec §8 SOL
// model. perf/README.md explains the numbers; `attnbwd_perf --help` lists the options.
//
// One Google Benchmark iteration is the whole protocol (warm-ups + timed calls), and it reports the
// median through manual time: real_time in the output IS the spec's statistic, not a mean.
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "clock.hpp"
#include "op_binding.hpp"
#include "sol_model.hpp"
#include "suite_options.hpp"
#include "summary.hpp"
#include "tools/gen.hpp"
#include "tools/workloads.hpp"

namespace attnbwd::perf {
namespace {

constexpr bool kDeviceBuild =
    !Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible;

template <class Exec>
constexpr bool is_cuda() {
#ifdef KOKKOS_ENABLE_CUDA
  return std::is_same_v<Exec, Kokkos::Cuda>;
#else
  return false;
#endif
}

// One benchmark: a workload of an op on a backend.
struct Entry {
  std::string op;
  tools::Workload workload;
  tools::Axes axes;  // resolved
  Work work;
  std::uint64_t seed = 0;
  std::string backend;
  Backend value = Backend::Auto;
  bool on_host = false;  // runs on the host execution space (serial) rather than the default one
  int position = 0, total = 0;
};

struct Run {
  SuiteOptions opts;
  Peaks peaks;
  Summary summary;
};
Run* g_run = nullptr;

// The inputs of the current workload, and their binding in one memory space. Benchmarks are
// registered workload by workload, so each workload's inputs are drawn once and shared by its
// backends; moving on frees the last workload's.
struct Cache {
  std::string input_key, binding_key;
  std::shared_ptr<const tools::TensorSet> inputs;
  OpCall call;
};
Cache g_cache;

std::string workload_key(const Entry& e) { return e.op + "#" + std::to_string(e.workload.index); }

template <class Exec>
OpCall& bound_call(const Exec& exec, const Entry& e) {
  const std::string ikey = workload_key(e);
  const std::string bkey = ikey + "@" + Exec::memory_space::name();
  if (g_cache.binding_key == bkey) return g_cache.call;
  g_cache.call = nullptr;  // release the old binding's memory before making a new one
  g_cache.binding_key.clear();
  if (g_cache.input_key != ikey) {
    g_cache.inputs.reset();
    g_cache.inputs = std::make_shared<const tools::TensorSet>(
        tools::generate_inputs(e.op, e.workload.axes, e.seed, e.workload.scalars));
    g_cache.input_key = ikey;
  }
  g_cache.call = bind_op(exec, e.op, e.axes, g_cache.inputs);
  exec.fence();
  g_cache.binding_key = bkey;
  return g_cache.call;
}

// The CUDA clock of this run: --clock, else cupti where built.
std::string cuda_clock_choice(const SuiteOptions& o) {
  if (!o.clock.empty()) return o.clock;
  return cupti_clock_built() ? "cupti" : "events";
}

template <class Exec>
std::unique_ptr<IterationClock> clock_for([[maybe_unused]] const Exec& exec, [[maybe_unused]] const SuiteOptions& o) {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (is_cuda<Exec>()) return make_cuda_clock(exec.cuda_stream(), cuda_clock_choice(o));
#endif
  return make_host_clock([exec] { exec.fence(); });
}

// The median of a sorted, non-empty list.
double median_of_sorted(const std::vector<double>& v) {
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string describe(const Entry& e) {
  char head[64];
  std::snprintf(head, sizeof head, "[%*d/%d] ", e.total >= 10 ? 2 : 1, e.position, e.total);
  return head + e.op + " #" + std::to_string(e.workload.index) + " (" +
         tools::axes_to_string(e.workload.axes) + ") " + e.backend;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <class Exec>
void run_benchmark(benchmark::State& state, const Entry& e) {
  const Exec exec;
  const SuiteOptions& o = g_run->opts;
  const double sol = t_sol(e.work, g_run->peaks);
  // Skipped rows get no counters in the JSON, so the label carries what reports join on.
  char sol_text[32];
  std::snprintf(sol_text, sizeof sol_text, "%.6g", sol);
  state.SetLabel("uuid=" + e.workload.uuid + " axes=" + tools::axes_to_string(e.workload.axes) +
                 " T_SOL_s=" + sol_text);
  state.counters["T_SOL_s"] = sol;
  state.counters["GEMM_FLOP"] = e.work.gemm_flop;
  state.counters["min_bytes"] = e.work.min_bytes;
  state.counters["bytes_2B"] = e.work.bytes_2b();

  Outcome out;
  out.op = e.op;
  out.backend = e.backend;
  out.workload = e.workload.index;
  std::fprintf(stderr, "%s: preparing inputs\n", describe(e).c_str());
  std::vector<double> times, event_times;
  try {
    const auto t_prep = std::chrono::steady_clock::now();
    OpCall& call = bound_call(exec, e);
    const double prep = seconds_since(t_prep);
    const auto clock = clock_for(exec, o);
    Options opts;
    opts.backend = e.value;
    opts.precision = o.precision == "strict" ? Precision::Strict : Precision::Default;
    opts.deterministic = o.deterministic;
    std::fprintf(stderr, "%s: inputs ready (%.1f s), timing (%s, flush %.0f MiB)\n", describe(e).c_str(), prep,
                 clock->method(), clock->flush_bytes() / 1048576.0);
    const auto t0 = std::chrono::steady_clock::now();
    // A time budget gives warm-ups a quarter of it, so several timed calls still fit.
    auto in_budget = [&](double share) { return o.max_seconds <= 0 || seconds_since(t0) < share * o.max_seconds; };
    for (int w = 0; w < o.warmup && (w == 0 || in_budget(0.25)); ++w) {
      clock->flush();
      call(opts);
      exec.fence();
    }
    for (int i = 0; i < o.iters && (i == 0 || in_budget(1.0)); ++i) {
      clock->flush();
      clock->start();
      call(opts);
      times.push_back(clock->stop());
      if (clock->last_events_seconds() >= 0) event_times.push_back(clock->last_events_seconds());
    }
  } catch (const std::exception& ex) {
    out.message = ex.what();
    std::fprintf(stderr, "%s: skipped: %s\n", describe(e).c_str(), ex.what());
    g_run->summary.add(out);
    state.SkipWithError(("skipped: " + out.message).c_str());
    return;
  }

  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  const double median = median_of_sorted(sorted);
  double mean = 0;
  for (double t : times) mean += t / static_cast<double>(n);
  for (auto _ : state) state.SetIterationTime(median);

  state.counters["T_s"] = median;
  state.counters["E"] = sol / median;
  state.counters["GEMM_FLOPs"] = e.work.gemm_flop / median;
  state.counters["bytes_per_s"] = e.work.min_bytes / median;
  state.counters["min_s"] = sorted.front();
  state.counters["mean_s"] = mean;
  state.counters["iters"] = static_cast<double>(n);
  if (event_times.size() == n) {
    std::sort(event_times.begin(), event_times.end());
    state.counters["T_events_s"] = median_of_sorted(event_times);
  }
  out.ran = true;
  out.seconds = median;
  out.efficiency = sol / median;
  out.iters = static_cast<int>(n);
  g_run->summary.add(out);
  std::fprintf(stderr, "%s: median %.4g ms, E = %.4g (%zu timed calls)\n", describe(e).c_str(), median * 1e3,
               sol / median, n);
}

// ---- what to run -------------------------------------------------------------------------------

std::vector<int> select_workloads(const std::string& how, const std::string& op,
                                  const std::vector<tools::Workload>& ws) {
  std::vector<int> picked;
  if (how == "all") {
    for (const auto& w : ws) picked.push_back(w.index);
  } else if (how == "smallest") {
    const tools::Definition def = tools::load_definition(op);
    int best = 0;
    double least = INFINITY;
    for (const auto& w : ws) {
      const double flop = workload_work(op, def.resolve_axes(w.axes)).gemm_flop;
      if (flop < least) least = flop, best = w.index;
    }
    picked.push_back(best);
  } else {
    for (std::size_t start = 0; start <= how.size();) {
      const std::size_t comma = std::min(how.find(',', start), how.size());
      picked.push_back(tools::find_workload(ws, how.substr(start, comma - start)).index);
      start = comma + 1;
    }
  }
  return picked;
}

struct Target {
  std::string name;
  Backend value;
  bool on_host;
};

// A backend the build cannot run (cuda without a CUDA space) is still registered: the library's
// own error then says why it was skipped.
std::vector<Target> select_targets(const std::vector<std::string>& names) {
  std::vector<std::string> wanted = names;
  if (wanted.empty()) {
    wanted = {"portable"};
    if (is_cuda<Kokkos::DefaultExecutionSpace>()) wanted.push_back("cuda");
  }
  std::vector<Target> targets;
  for (const std::string& n : wanted) {
    if (n == "serial") targets.push_back({n, Backend::Serial, true});
    else if (n == "portable") targets.push_back({n, Backend::Portable, false});
    else if (n == "cuda") targets.push_back({n, Backend::Cuda, false});
    else throw std::invalid_argument("--backend: unknown backend \"" + n + "\" (serial, portable, cuda)");
  }
  return targets;
}

void print_sol_table(const std::vector<Entry>& entries, const Peaks& p) {
  std::printf("%-29s %3s %-40s %10s %9s %9s %10s %10s %10s\n", "op", "#", "axes", "GEMM_GFLOP", "min_MB",
              "2B_MB", "t_gemm_ms", "t_dram_ms", "T_SOL_ms");
  for (const Entry& e : entries) {
    if (e.backend != entries.front().backend) continue;
    std::printf("%-29s %3d %-40s %10.2f %9.2f %9.2f %10.4f %10.4f %10.4f\n", e.op.c_str(), e.workload.index,
                tools::axes_to_string(e.workload.axes).c_str(), e.work.gemm_flop / 1e9, e.work.min_bytes / 1e6,
                e.work.bytes_2b() / 1e6, t_gemm(e.work, p) * 1e3, t_dram_2b(e.work, p) * 1e3,
                t_sol(e.work, p) * 1e3);
  }
  std::printf("(%s model: %.4g FLOP/s bf16, %.4g B/s; published SOL values add ~0.4 us)\n", p.model.c_str(),
              p.bf16_flops, p.dram_bytes_per_s);
}

bool stdout_is_machine_format(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--benchmark_format=", 0) == 0 && a != "--benchmark_format=console") return true;
  }
  return false;
}

int suite_main(const SuiteOptions& opts, bool machine_stdout) {
  Run run;
  run.opts = opts;
  g_run = &run;
  const SuiteOptions& o = run.opts;

  // The SOL model's GPU: the one the default execution space runs on, or forced, or H200 on a host.
  GpuInfo gpu;
  if (is_cuda<Kokkos::DefaultExecutionSpace>()) gpu = query_gpu();
  PeakChoice choice = peaks_for_device(gpu.present ? gpu.name : "");
  if (!o.peaks.empty()) {
    choice.peaks = o.peaks == "b200" ? b200_peaks() : h200_peaks();
    choice.note = "SOL model forced by --peaks" + (choice.note.empty() ? "" : "; detected: " + choice.note);
  } else if (choice.known) {
    choice.note.clear();
  }
  run.peaks = choice.peaks;

  const std::vector<std::string> ops = o.ops.empty() ? tools::op_names() : o.ops;
  const std::vector<Target> targets = select_targets(o.backends);
  const std::string how = !o.workloads.empty() ? o.workloads : kDeviceBuild ? "all" : "smallest";

  std::vector<Entry> entries;
  for (const std::string& op : ops) {
    const auto& names = tools::op_names();
    const auto op_pos = std::find(names.begin(), names.end(), op) - names.begin();
    if (op_pos == static_cast<long>(names.size()))
      throw std::invalid_argument("--ops: unknown op \"" + op + "\"");
    const tools::Definition def = tools::load_definition(op);
    const auto ws = tools::load_workloads(op);
    for (int index : select_workloads(how, op, ws)) {
      for (const Target& t : targets) {
        Entry e;
        e.op = op;
        e.workload = ws.at(static_cast<std::size_t>(index));
        e.axes = def.resolve_axes(e.workload.axes);
        e.work = workload_work(op, e.axes);
        e.seed = o.seed + 1000 * static_cast<std::uint64_t>(op_pos) + static_cast<std::uint64_t>(index);
        e.backend = t.name;
        e.value = t.value;
        e.on_host = t.on_host;
        entries.push_back(e);
      }
    }
  }
  for (std::size_t i = 0; i < entries.size(); ++i) {
    entries[i].position = static_cast<int>(i + 1);
    entries[i].total = static_cast<int>(entries.size());
  }
  if (o.sol_table) {
    print_sol_table(entries, run.peaks);
    return 0;
  }

  for (const Entry& e : entries) {
    char name[160];
    std::snprintf(name, sizeof name, "%s/w%02d/%s", e.op.c_str(), e.workload.index, e.backend.c_str());
    auto fn = [e](benchmark::State& st) {
      if (e.on_host) run_benchmark<Kokkos::DefaultHostExecutionSpace>(st, e);
      else run_benchmark<Kokkos::DefaultExecutionSpace>(st, e);
    };
    benchmark::RegisterBenchmark(name, fn)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
  }

  char model_text[160];
  std::snprintf(model_text, sizeof model_text, "%s model (%.4g TFLOP/s bf16, %.4g TB/s)",
                choice.peaks.model.c_str(), choice.peaks.bf16_flops / 1e12, choice.peaks.dram_bytes_per_s / 1e12);
  const std::string model = model_text;
  benchmark::AddCustomContext("attnbwd_sol_model", model);
  if (!choice.note.empty()) benchmark::AddCustomContext("attnbwd_sol_note", choice.note);
  benchmark::AddCustomContext("attnbwd_gpu", gpu.present ? gpu.name : "none");
  if (gpu.present) benchmark::AddCustomContext("attnbwd_gpu_l2_bytes", std::to_string(gpu.l2_bytes));
  benchmark::AddCustomContext("attnbwd_exec_space", Kokkos::DefaultExecutionSpace::name());
  benchmark::AddCustomContext(
      "attnbwd_time",
      "real_time = median of the timed calls (counter iters, requested " + std::to_string(o.iters) +
          ") after " + std::to_string(o.warmup) +
          " warm-ups; each call preceded by an untimed cache flush (2x L2 on a GPU, 2x the largest "
          "CPU cache on a host); for Kokkos::Cuda the clock named by attnbwd_cuda_clock (cupti: the "
          "span from the earliest GPU start to the latest GPU end of the call's kernels, memsets and "
          "memcpys, spec 7, with the CUDA events' median beside it as T_events_s; events: CUDA "
          "events on the call's stream), else wall clock between fences; T_s = the same median in seconds");
  if (is_cuda<Kokkos::DefaultExecutionSpace>()) benchmark::AddCustomContext("attnbwd_cuda_clock", cuda_clock_choice(o));
  benchmark::AddCustomContext("attnbwd_seed", std::to_string(o.seed));
  benchmark::AddCustomContext("attnbwd_precision", o.precision);
  benchmark::AddCustomContext("attnbwd_deterministic", o.deterministic ? "true" : "false");

  benchmark::RunSpecifiedBenchmarks();
  // With JSON or CSV on stdout the summary goes to stderr, keeping stdout parseable.
  std::FILE* out = machine_stdout ? stderr : stdout;
  const std::string clock_text =
      is_cuda<Kokkos::DefaultExecutionSpace>() ? model + "; CUDA clock: " + cuda_clock_choice(o) : model;
  run.summary.print(out, clock_text, choice.note, o.iters);
  std::fflush(out);
  benchmark::Shutdown();
  return 0;
}

}  // namespace
}  // namespace attnbwd::perf

int main(int argc, char** argv) {
  using namespace attnbwd::perf;
  Kokkos::ScopeGuard kokkos(argc, argv);  // takes --kokkos-* out of argv
  int rc = 0;
  try {
    const SuiteOptions opts = parse_suite_options(argc, argv);  // takes ours out
    if (opts.help) return std::fputs(kSuiteUsage, stdout), 0;
    const bool machine_stdout = stdout_is_machine_format(argc, argv);
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
    rc = suite_main(opts, machine_stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnbwd_perf: %s\n", e.what());
    rc = 2;
  }
  g_cache = Cache{};  // the last workload's Views go before Kokkos finalizes
  return rc;
}
