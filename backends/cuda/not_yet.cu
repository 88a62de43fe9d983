// Ops whose fast path does not exist yet: the dispatcher asks `supports`, gets the reason, and runs
// the portable path instead (issues 7, 8 replace these one by one).
#include "attnbwd/error.hpp"
#include "cuda_backend.hpp"

namespace attnbwd::cuda {
namespace {
const char* const kNotYet = "no CUDA fast path for this op yet (portable path used)";
}

Support supports(const VisionMhaShape&, const Options&) { return {kNotYet}; }
void run(const VisionMhaShape&, const VisionMhaArgs&, const Options&, cudaStream_t) { throw Error("options.backend", kNotYet); }

Support supports(const VisionVarlenShape&, const Options&) { return {kNotYet}; }
void run(const VisionVarlenShape&, const VisionVarlenArgs&, const Options&, cudaStream_t) { throw Error("options.backend", kNotYet); }

}  // namespace attnbwd::cuda
