// Options shared by the four operations.
#pragma once

namespace attnbwd {

// Default: the fastest mode that passes the benchmark tolerances (spec §6). For the fp32 ops the fast
// paths may run GEMMs with fp16 or TF32 operands and fp32 accumulation. For the bf16 ops both modes
// follow the reference's rounding points.
// Strict: fp32 ops within ~1e-5 relative of float64 (fp32 FMA or 3xTF32 GEMMs).
enum class Precision { Default, Strict };

// Which implementation runs. Auto picks the fastest one available for the execution space:
// Cuda (hand-tuned kernels) on a CUDA space when built, else Portable (Kokkos kernels);
// Serial is the host oracle (plain loops, double accumulation), for host-accessible memory only.
enum class Backend { Auto, Serial, Portable, Cuda };

struct Options {
  Precision precision = Precision::Default;
  // No atomics whose order changes results: the same bits on every rerun.
  bool deterministic = false;
  Backend backend = Backend::Auto;
};

const char* to_string(Backend b) noexcept;
const char* to_string(Precision p) noexcept;

}  // namespace attnbwd
