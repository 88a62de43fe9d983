// attnbwd_perf's own command-line options (Kokkos' --kokkos-* and Google Benchmark's --benchmark_*
// options pass through to them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnbwd::perf {

struct SuiteOptions {
  std::vector<std::string> backends;  // empty: the default set (see usage)
  std::vector<std::string> ops;       // empty: all four
  std::string workloads;              // "all", "smallest" or indices "0,3,8"; empty: build default
  int iters = 50;                     // timed iterations (median reported)
  int warmup = 10;                    // untimed calls before them
  double max_seconds = 0;             // per benchmark, 0 = no limit; stops early, >= 1 timed call
  std::uint64_t seed = 200;           // inputs of workload i of op k use seed + 1000·k + i
  std::string peaks;                  // "h200" / "b200": force the SOL model's GPU
  std::string precision = "default";  // Options::precision of every call: "default" or "strict"
  bool deterministic = false;         // Options::deterministic of every call
  std::string clock;                  // "cupti" / "events": the CUDA clock; empty: cupti where built
  bool sol_table = false;             // print the SOL model of the selected workloads and exit
  bool help = false;
};

extern const char* const kSuiteUsage;

// Takes the options it knows out of argv (shifting the rest down) and returns them. Throws
// std::invalid_argument on a malformed value.
SuiteOptions parse_suite_options(int& argc, char** argv);

}  // namespace attnbwd::perf
