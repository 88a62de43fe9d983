// A captured graph segment replayed as direct launches (ATTNBWD_CUDA_GRAPHS=sidedirect, backends/cuda/README.md):
// its nodes read once after the capture (kernel parameters, launch attributes, programmatic edges) and launched on
// a stream at every replay in the captured order, without a graph. Only chains of kernel, memset and empty nodes
// whose kernel-to-kernel edges are full or programmatic (PDL) qualify; any other segment stays a graph.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

namespace attnbwd::cuda {

struct DirectChain;  // the launches, and the graph that owns their parameters

// The chain of `graph` (which it takes over, and frees with the chain), or null with `why` set where the graph is
// not such a chain (the graph is then left to the caller).
std::shared_ptr<const DirectChain> direct_chain(cudaGraph_t graph, std::string& why);

// Every launch of `chain` on `stream`, in order; an error as attnbwd::Error.
void launch_direct(const DirectChain& chain, cudaStream_t stream);

// How many launches `chain` holds.
std::size_t direct_launches(const DirectChain& chain);

}  // namespace attnbwd::cuda
