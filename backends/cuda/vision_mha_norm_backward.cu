// vision_mha_norm_backward on the CUDA fast path (spec §4): not written yet (issue 7). The dispatcher
// asks `supports`, gets the reason, and runs the portable path instead.
#include "attnbwd/error.hpp"
#include "cuda_backend.hpp"

namespace attnbwd::cuda {
namespace {
const char* const kNotYet = "no CUDA fast path for vision_mha_norm_backward yet (portable path used)";
}

Support supports(const VisionMhaShape&, const Options&) { return {kNotYet}; }
void run(const VisionMhaShape&, const VisionMhaArgs&, const Options&, cudaStream_t) { throw Error("options.backend", kNotYet); }

}  // namespace attnbwd::cuda
