#include "suite_options.hpp"

#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

namespace attnbwd::perf {

const char* const kSuiteUsage = R"(usage: attnbwd_perf [options] [--benchmark_...] [--kokkos-...]

Times the library's ops on the benchmark workloads (shared/solexec) as spec §7 does: inputs drawn
once per workload, the cache flushed before every call, the CUPTI span of the call's GPU work or
CUDA events (device) or the wall clock (host), median of the timed calls after untimed warm-ups. Counters: E = T_SOL/T (spec §8 model),
GEMM FLOP/s, bytes/s. A summary of geomean E per op and backend ends the run.

  --backend=LIST     serial,portable,cuda (default: portable, and cuda in a CUDA build). serial is
                     the host oracle: very slow, use it with --workloads=smallest --iters=1
  --ops=LIST         ops to run (default: all four)
  --workloads=W      all | smallest (least GEMM work per op) | indices, e.g. 0,3,8
                     (default: all in a GPU build, smallest in a host-only build)
  --iters=N          timed calls per benchmark (default 50)
  --warmup=N         untimed calls first (default 10)
  --max-seconds=X    stop a benchmark's warm-ups and timed calls once X seconds have passed
                     (at least one timed call; the counter 'iters' says how many ran)
  --seed=N           input seed base (default 200)
  --peaks=h200|b200  the GPU of the SOL model (default: the detected GPU; H200 on a host)
  --precision=P      default | strict: Options::precision of every call (default: default)
  --deterministic    Options::deterministic = true for every call
  --clock=C          cupti | events: how a CUDA call is timed (default: cupti where the build has
                     it). cupti = the spec's measure: earliest GPU start to latest GPU end of the
                     call's kernels, memsets and memcpys (the events time is reported beside it as
                     T_events_s); events = CUDA events on the call's stream around the call
  --sol-table        print the SOL model of the selected workloads and exit
JSON: real_time is the median of the timed calls (time_unit us); see perf/README.md.
)";

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

long long to_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < lo || n > hi)
    throw std::invalid_argument(flag + " expects an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got \"" + v + "\"");
  return n;
}

}  // namespace

SuiteOptions parse_suite_options(int& argc, char** argv) {
  SuiteOptions o;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto eq = arg.find('=');
    const std::string key = arg.substr(0, eq);
    const bool has_value = eq != std::string::npos;
    const std::string value = has_value ? arg.substr(eq + 1) : "";
    auto need = [&] {
      if (!has_value) throw std::invalid_argument(key + " needs a value: " + key + "=...");
      return value;
    };
    if (key == "--help" || key == "-h") o.help = true;
    else if (key == "--backend") o.backends = split(need());
    else if (key == "--ops") o.ops = split(need());
    else if (key == "--workloads") o.workloads = need();
    else if (key == "--iters") o.iters = static_cast<int>(to_int(key, need(), 1, 100000));
    else if (key == "--warmup") o.warmup = static_cast<int>(to_int(key, need(), 0, 100000));
    else if (key == "--seed") o.seed = static_cast<std::uint64_t>(to_int(key, need(), 0, 1LL << 62));
    else if (key == "--peaks") o.peaks = need();
    else if (key == "--sol-table") o.sol_table = true;
    else if (key == "--precision") o.precision = need();
    else if (key == "--deterministic") o.deterministic = true;
    else if (key == "--clock") o.clock = need();
    else if (key == "--max-seconds") {
      char* end = nullptr;
      const std::string v = need();
      o.max_seconds = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || o.max_seconds < 0)
        throw std::invalid_argument("--max-seconds expects a number >= 0, got \"" + v + "\"");
    } else {
      argv[kept++] = argv[i];  // not ours: left for Google Benchmark
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  if (o.precision != "default" && o.precision != "strict")
    throw std::invalid_argument("--precision expects default or strict, got \"" + o.precision + "\"");
  if (o.clock != "" && o.clock != "cupti" && o.clock != "events")
    throw std::invalid_argument("--clock expects cupti or events, got \"" + o.clock + "\"");
  if (o.peaks != "" && o.peaks != "h200" && o.peaks != "b200")
    throw std::invalid_argument("--peaks expects h200 or b200, got \"" + o.peaks + "\"");
  return o;
}

}  // namespace attnbwd::perf
