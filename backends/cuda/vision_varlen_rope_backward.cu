// vision_varlen_rope_backward on the CUDA fast path (spec §5): not written yet (issue 8). The
// dispatcher asks `supports`, gets the reason, and runs the portable path instead.
#include "attnbwd/error.hpp"
#include "cuda_backend.hpp"

namespace attnbwd::cuda {
namespace {
const char* const kNotYet = "no CUDA fast path for vision_varlen_rope_backward yet (portable path used)";
}

Support supports(const VisionVarlenShape&, const Options&) { return {kNotYet}; }
void run(const VisionVarlenShape&, const VisionVarlenArgs&, const Options&, cudaStream_t) { throw Error("options.backend", kNotYet); }

}  // namespace attnbwd::cuda
