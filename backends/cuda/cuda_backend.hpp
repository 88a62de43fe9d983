// The CUDA fast path's entry points, as the dispatcher sees them: plain CUDA C++ behind this header
// (no Kokkos), POD arguments from attnbwd/args.hpp, and the caller's stream.
//
// Each op has a `supports` check (device and shape) so the dispatcher can fall back to the portable
// path instead of failing, and a `run` that enqueues the whole op on `stream`.
#pragma once

#include <cuda_runtime_api.h>

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

}  // namespace attnbwd::cuda
