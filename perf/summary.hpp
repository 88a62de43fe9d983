// The end-of-run summary: geomean of E = T_SOL/T per op and backend, and what was skipped.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace attnbwd::perf {

struct Outcome {
  std::string op, backend;
  int workload = 0;
  bool ran = false;
  double seconds = 0;  // median
  double efficiency = 0;
  int iters = 0;
  std::string message;  // why it was skipped
};

class Summary {
 public:
  void add(Outcome o) { outcomes_.push_back(std::move(o)); }
  // `model` names the SOL peaks, e.g. "H200 model (989.4 TFLOP/s bf16, 4.8 TB/s)"; `note` flags
  // an unknown GPU or a host run.
  void print(std::FILE* out, const std::string& model, const std::string& note, int wanted_iters) const;

 private:
  std::vector<Outcome> outcomes_;
};

}  // namespace attnbwd::perf
