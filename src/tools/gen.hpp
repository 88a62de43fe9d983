// Random inputs for an op, drawn as the benchmark draws them (spec §1.1): name-based rules for
// "random" inputs, the reference's get_inputs for problem 017's "custom" inputs, scalars from the
// workload. One attnbwd::Rng stream gives each input (in definition order) its seed; an input's rows are
// drawn in chunks, each from its own stream seeded by (input seed, chunk), on several threads
// (ATTNBWD_GEN_THREADS, default the hardware's) — so a seed names one file on every machine, whatever
// the thread count.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/tensor_set.hpp"
#include "tools/workloads.hpp"

namespace attnbwd::tools {

// Scalar inputs as every benchmark workload sets them (003 scaling, 001 scale and norm_eps).
std::map<std::string, double> default_scalars(const std::string& op);

// Every input of `op` (names and order of the definition). `axes` holds the variable axes and
// optionally overrides constants (see Definition::resolve_axes); `scalars` overrides
// default_scalars. Scalars are stored as 0-d F64 tensors. Throws Error naming a missing or unknown
// axis.
TensorSet generate_inputs(const std::string& op, const Axes& axes, std::uint64_t seed);
TensorSet generate_inputs(const std::string& op, const Axes& axes, std::uint64_t seed,
                          const std::map<std::string, double>& scalars);

// 017's cu_seqlens: `total` tokens split into `n` sequences of floor(total/n), the first total % n
// of them one longer: [0, L0, L0+L1, ..., total].
std::vector<std::int32_t> even_cu_seqlens(std::int64_t total, std::int64_t n);

}  // namespace attnbwd::tools
