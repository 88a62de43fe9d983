// The CUDA fast path's entry points, as the dispatcher sees them: plain CUDA C++ behind this header
// (no Kokkos), POD arguments from attnbwd/args.hpp, and the caller's stream.
//
// Each op has a `supports` check (device and shape) so the dispatcher can fall back to the portable
// path instead of failing, and a `run` that enqueues the whole op on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <string>

#include "attnbwd/args.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd::cuda {

// Why the fast path cannot take a call (empty: it can).
struct Support {
  std::string reason;
  explicit operator bool() const { return reason.empty(); }
};

Support supports(const OutProjShape& s, const Options& o);
void run(const OutProjShape& s, const OutProjArgs& a, const Options& o, cudaStream_t stream);

Support supports(const GqaRopeShape& s, const Options& o);
void run(const GqaRopeShape& s, const GqaRopeArgs& a, const Options& o, cudaStream_t stream);

Support supports(const VisionMhaShape& s, const Options& o);
void run(const VisionMhaShape& s, const VisionMhaArgs& a, const Options& o, cudaStream_t stream);

Support supports(const VisionVarlenShape& s, const Options& o);
void run(const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o, cudaStream_t stream);
// A varlen call whose cu_seqlens is on the device with no host copy (dispatch.cpp): the host must read it to validate
// it, and the call's first stage needs none of its values. run_begin (arguments validated but for cu_seqlens' values;
// `s` from them) queues the op's first part, which writes scratch only, then a copy of cu_seqlens that waits only for
// the caller's earlier work (not for the part); run_host_copy waits for the copy and writes the count values to `cu_host`; then either
// run_finish (validated: the rest of the op) or run_abandon (invalid: nothing more is queued, every output is
// untouched). Without this the GPU idles while the host waits for the copy and then queues the whole op (~26 µs per
// call on an H200, CUPTI timeline, perf/NOTES.md, thirty-second session). ATTNBWD_CUDA_VARLEN_EARLY=off: the plain
// path (copy, wait, validate, run).
bool early_part_wanted();
void run_begin(const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o, cudaStream_t stream);
void run_host_copy(std::int32_t* cu_host, std::int64_t count);
void run_finish(const VisionVarlenShape& s, const VisionVarlenArgs& a, const Options& o, cudaStream_t stream);
void run_abandon(cudaStream_t stream);

}  // namespace attnbwd::cuda
