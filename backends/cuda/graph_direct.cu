#include "graph_direct.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>
#include <vector>

#include "attnbwd/error.hpp"

// The driver API through the runtime's entry points (no link against libcuda): the runtime's graph, node and stream
// handles are the driver's (cudaGraph_t is CUgraph, cudaStream_t is CUstream).
namespace attnbwd::cuda {
namespace {

struct Driver {
  PFN_cuGraphGetRootNodes_v10000 roots = nullptr;
  PFN_cuGraphNodeGetDependentNodes_v12030 dependents = nullptr;
  PFN_cuGraphNodeGetType_v10000 type = nullptr;
  PFN_cuGraphKernelNodeGetParams_v12000 kernel = nullptr;
  PFN_cuGraphKernelNodeGetAttribute_v11000 attribute = nullptr;
  PFN_cuGraphMemsetNodeGetParams_v10000 memset = nullptr;
  PFN_cuLaunchKernelEx_v11060 launch = nullptr;
  PFN_cuMemsetD2D8Async_v3020 set8 = nullptr;
  PFN_cuMemsetD2D16Async_v3020 set16 = nullptr;
  PFN_cuMemsetD2D32Async_v3020 set32 = nullptr;
  std::string missing;  // the first entry point the driver lacks
};

template <class F>
void entry(const char* name, unsigned version, F& f, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    cudaGetLastError();
    if (missing.empty()) missing = name;
    return;
  }
  f = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    entry("cuGraphGetRootNodes", 10000, d.roots, d.missing);
    entry("cuGraphNodeGetDependentNodes", 12030, d.dependents, d.missing);
    entry("cuGraphNodeGetType", 10000, d.type, d.missing);
    entry("cuGraphKernelNodeGetParams", 12000, d.kernel, d.missing);
    entry("cuGraphKernelNodeGetAttribute", 11000, d.attribute, d.missing);
    entry("cuGraphMemsetNodeGetParams", 10000, d.memset, d.missing);
    entry("cuLaunchKernelEx", 11060, d.launch, d.missing);
    entry("cuMemsetD2D8Async", 3020, d.set8, d.missing);
    entry("cuMemsetD2D16Async", 3020, d.set16, d.missing);
    entry("cuMemsetD2D32Async", 3020, d.set32, d.missing);
  });
  return d;
}

struct Launch {
  bool memset = false;
  CUDA_KERNEL_NODE_PARAMS kernel{};  // its parameter pointers point into the graph's node (kept alive)
  CUlaunchAttribute attrs[4]{};
  unsigned n_attrs = 0;
  bool cluster = false;  // attrs[0] is the cluster's shape
  CUDA_MEMSET_NODE_PARAMS set{};
};

}  // namespace

struct DirectChain {
  CUgraph graph = nullptr;
  std::vector<Launch> launches;
  ~DirectChain() {
    if (graph) cudaGraphDestroy(graph);
  }
};

std::shared_ptr<const DirectChain> direct_chain(cudaGraph_t graph, std::string& why) {
  const Driver& d = driver();
  if (!d.missing.empty()) {
    why = "the driver lacks " + d.missing;
    return nullptr;
  }
  std::vector<Launch> launches;
  CUgraphNode node = nullptr;
  std::size_t n = 0;  // counted first: a smaller array is filled without a word about the rest
  if (d.roots(graph, nullptr, &n) != CUDA_SUCCESS || n != 1 || d.roots(graph, &node, &n) != CUDA_SUCCESS || n != 1) {
    why = "not one root node";
    return nullptr;
  }
  bool programmatic = false;  // the edge into `node` is a programmatic (PDL) one
  while (node != nullptr) {
    CUgraphNodeType type{};
    if (d.type(node, &type) != CUDA_SUCCESS) {
      why = "a node's type unreadable";
      return nullptr;
    }
    Launch l;
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      if (d.kernel(node, &l.kernel) != CUDA_SUCCESS) {
        why = "a kernel node's parameters unreadable";
        return nullptr;
      }
      CUlaunchAttributeValue v{};  // the cluster's shape first (launch_direct may leave it out)
      if (d.attribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v) == CUDA_SUCCESS &&
          v.clusterDim.x * v.clusterDim.y * v.clusterDim.z > 1) {
        l.attrs[l.n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        l.attrs[l.n_attrs++].value = v;
        l.cluster = true;
      }
      v = CUlaunchAttributeValue{};
      if (d.attribute(node, CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, &v) == CUDA_SUCCESS &&
          v.clusterSchedulingPolicyPreference != CU_CLUSTER_SCHEDULING_POLICY_DEFAULT) {
        l.attrs[l.n_attrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
        l.attrs[l.n_attrs++].value = v;
      }
      v = CUlaunchAttributeValue{};
      if (d.attribute(node, CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v) == CUDA_SUCCESS && v.cooperative != 0) {
        l.attrs[l.n_attrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        l.attrs[l.n_attrs++].value = v;
      }
      if (programmatic) {
        l.attrs[l.n_attrs].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        l.attrs[l.n_attrs].value = CUlaunchAttributeValue{};
        l.attrs[l.n_attrs++].value.programmaticStreamSerializationAllowed = 1;
      }
      launches.push_back(l);
    } else if (type == CU_GRAPH_NODE_TYPE_MEMSET) {
      l.memset = true;
      if (d.memset(node, &l.set) != CUDA_SUCCESS || (l.set.elementSize != 1 && l.set.elementSize != 2 &&
                                                     l.set.elementSize != 4)) {
        why = "a memset node unreadable";
        return nullptr;
      }
      launches.push_back(l);
    } else if (type != CU_GRAPH_NODE_TYPE_EMPTY) {
      why = "a node neither kernel, memset nor empty";
      return nullptr;
    }
    if (programmatic && l.memset) {
      why = "a programmatic edge into a memset";
      return nullptr;
    }
    CUgraphNode next[2] = {nullptr, nullptr};
    CUgraphEdgeData edges[2]{};
    std::size_t m = 2;
    if (d.dependents(node, next, edges, &m) != CUDA_SUCCESS || m > 1) {
      why = "not a chain";
      return nullptr;
    }
    if (m == 1 && edges[0].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC &&
        edges[0].from_port != CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC) {
      why = "a launch-order edge";
      return nullptr;
    }
    programmatic = m == 1 && edges[0].type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC;
    node = m == 1 ? next[0] : nullptr;
  }
  auto chain = std::make_shared<DirectChain>();
  chain->graph = graph;
  chain->launches = std::move(launches);
  return chain;
}

void launch_direct(const DirectChain& chain, cudaStream_t stream) {
  const Driver& d = driver();
  const auto check = [](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS) throw Error(std::string("cuda backend: a direct replay's ") + what + " failed (CUresult " +
                                       std::to_string(static_cast<int>(r)) + ")");
  };
  for (const Launch& l : chain.launches) {
    if (l.memset) {
      const CUDA_MEMSET_NODE_PARAMS& s = l.set;
      const std::size_t pitch = s.height > 1 ? s.pitch : s.width * s.elementSize;
      CUresult r = CUDA_SUCCESS;
      if (s.elementSize == 1)
        r = d.set8(s.dst, pitch, static_cast<unsigned char>(s.value), s.width, s.height, stream);
      else if (s.elementSize == 2)
        r = d.set16(s.dst, pitch, static_cast<unsigned short>(s.value), s.width, s.height, stream);
      else
        r = d.set32(s.dst, pitch, s.value, s.width, s.height, stream);
      check(r, "memset");
      continue;
    }
    const CUDA_KERNEL_NODE_PARAMS& k = l.kernel;
    CUlaunchConfig config{};
    config.gridDimX = k.gridDimX, config.gridDimY = k.gridDimY, config.gridDimZ = k.gridDimZ;
    config.blockDimX = k.blockDimX, config.blockDimY = k.blockDimY, config.blockDimZ = k.blockDimZ;
    config.sharedMemBytes = k.sharedMemBytes;
    config.hStream = stream;
    config.attrs = const_cast<CUlaunchAttribute*>(l.attrs);
    config.numAttrs = l.n_attrs;
    // A CUkernel may stand for a CUfunction in a launch (the driver API's cuLaunchKernel).
    CUfunction f = k.func != nullptr ? k.func : reinterpret_cast<CUfunction>(k.kern);
    void** extra = k.kernelParams != nullptr ? nullptr : k.extra;
    CUresult r = d.launch(&config, f, k.kernelParams, extra);
    if (r != CUDA_SUCCESS && l.cluster) {
      // A kernel whose cluster shape is compiled in may refuse it as a launch attribute too (the node reports it
      // either way); a refused launch queued nothing, so it is tried again without.
      config.attrs = const_cast<CUlaunchAttribute*>(l.attrs + 1);
      config.numAttrs = l.n_attrs - 1;
      r = d.launch(&config, f, k.kernelParams, extra);
    }
    check(r, "kernel launch");
  }
}

std::size_t direct_launches(const DirectChain& chain) { return chain.launches.size(); }

}  // namespace attnbwd::cuda
