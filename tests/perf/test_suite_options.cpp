// attnbwd_perf's own options (perf/suite_options.*): values parsed, malformed ones refused naming the flag, and
// everything else left in argv for Google Benchmark and Kokkos.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "perf/suite_options.hpp"

using attnbwd::perf::parse_suite_options;
using attnbwd::perf::SuiteOptions;

namespace {

// Parses `args` (argv[0] added); `rest` gets what was left in argv after it.
SuiteOptions parse(std::vector<std::string> args, std::vector<std::string>* rest = nullptr) {
  args.insert(args.begin(), "attnbwd_perf");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  const SuiteOptions o = parse_suite_options(argc, argv.data());
  if (rest) rest->assign(argv.begin() + 1, argv.begin() + argc);
  return o;
}

std::string refusal(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PerfSuiteOptions, ParsesItsOwnAndLeavesTheRest) {
  std::vector<std::string> rest;
  const SuiteOptions o = parse({"--clock=events", "--benchmark_format=json", "--ops=out_proj_backward",
                                "--workloads=0,3", "--iters=7", "--kokkos-num-threads=2", "--deterministic"},
                               &rest);
  EXPECT_EQ(o.clock, "events");
  EXPECT_EQ(o.ops, std::vector<std::string>{"out_proj_backward"});
  EXPECT_EQ(o.workloads, "0,3");
  EXPECT_EQ(o.iters, 7);
  EXPECT_TRUE(o.deterministic);
  EXPECT_EQ(rest, (std::vector<std::string>{"--benchmark_format=json", "--kokkos-num-threads=2"}));
  EXPECT_EQ(parse({}).clock, "");  // the build's default: cupti where built, else events
  EXPECT_EQ(parse({"--clock=cupti"}).clock, "cupti");
}

TEST(PerfSuiteOptions, RefusesMalformedValuesNamingTheFlag) {
  EXPECT_NE(refusal({"--clock=wall"}).find("--clock"), std::string::npos);
  EXPECT_NE(refusal({"--clock"}).find("--clock"), std::string::npos);
  EXPECT_NE(refusal({"--iters=0"}).find("--iters"), std::string::npos);
  EXPECT_NE(refusal({"--precision=half"}).find("--precision"), std::string::npos);
  EXPECT_NE(refusal({"--peaks=a100"}).find("--peaks"), std::string::npos);
  EXPECT_NE(refusal({"--max-seconds=-1"}).find("--max-seconds"), std::string::npos);
}
