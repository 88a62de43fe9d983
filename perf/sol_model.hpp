// The speed-of-light model of spec §8 with the per-workload counts of spec §9:
//   T_SOL = max(GEMM_FLOP / peak_bf16_dense, bytes_2B / peak_DRAM)
// SOLAR counts every problem at the bf16 tensor-core rate and every element at 2 bytes, fp32 ones
// included, so bytes_2B = 2 × (the elements of the §9 min-DRAM-bytes formula).
// The published SOL values are this T_SOL (at the B200 constants) + about 0.4 µs; the model itself
// leaves the offset out, so E = T_SOL / T is slightly optimistic for the smallest workloads.
#pragma once

#include <string>

#include "tools/workloads.hpp"

namespace attnbwd::perf {

// What one workload must do at minimum (spec §9).
struct Work {
  double gemm_flop = 0;  // 2·M·N·K over every matrix product of the reference
  double elements = 0;   // every input read once + every output written once, in elements
  double min_bytes = 0;  // the same at the real dtypes (bf16, fp32, int32): §9's "min DRAM bytes"
  double bytes_2b() const { return 2.0 * elements; }
};

// `axes`: every axis of the workload, constants and expressions resolved (Definition::resolve_axes).
// Throws attnbwd::Error for an unknown op or a missing axis.
Work workload_work(const std::string& op, const tools::Axes& axes);

// Peak rates of one GPU as the spec's model takes them.
struct Peaks {
  std::string model;  // "H200", "B200"
  double bf16_flops = 0;
  double dram_bytes_per_s = 0;
};
const Peaks& h200_peaks();  // 989.4 TFLOP/s, 4.8 TB/s (spec §8)
const Peaks& b200_peaks();  // 1.811 PFLOP/s at 1.5 GHz locked clocks, 7.667 TB/s

// The peaks for a device name such as "NVIDIA H200". An unknown name, or "" (no GPU: a host run),
// gets the H200 model with known = false and a note saying so.
struct PeakChoice {
  Peaks peaks;
  bool known = false;
  std::string note;
};
PeakChoice peaks_for_device(const std::string& device_name);

double t_gemm(const Work& w, const Peaks& p);  // seconds
double t_dram_2b(const Work& w, const Peaks& p);
double t_sol(const Work& w, const Peaks& p);

// What the published SOL values carry on top of the model (spec §8, §9).
constexpr double kPublishedOffsetSeconds = 0.4e-6;

}  // namespace attnbwd::perf
