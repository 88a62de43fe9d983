// Backend selection for every operation and execution space. Validation happens here, before any
// backend touches an output.
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/detail/views.hpp"
#include "attnbwd/error.hpp"
#include "portable/portable.hpp"
#include "serial/serial.hpp"
#include "validate_varlen.hpp"
#if defined(ATTNBWD_HAVE_CUDA_FAST_PATH) && defined(KOKKOS_ENABLE_CUDA)
#include "cuda/cuda_backend.hpp"
#define ATTNBWD_DISPATCH_CUDA 1
#endif

namespace attnbwd::detail {
namespace {

template <class ExecSpace>
constexpr bool host_space() {
  return Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
}

// Byte copies between the execution space's memory and the host, through unmanaged Views.
template <class ExecSpace>
void copy_bytes(const ExecSpace& exec, void* dst, bool dst_host, const void* src, bool src_host,
                std::size_t n) {
  using Bytes = Kokkos::MemoryTraits<Kokkos::Unmanaged>;
  using HostV = Kokkos::View<char*, Kokkos::HostSpace, Bytes>;
  using DevV = Kokkos::View<char*, typename ExecSpace::memory_space, Bytes>;
  char* d = static_cast<char*>(dst);
  char* s = static_cast<char*>(const_cast<void*>(src));
  if (dst_host && src_host) {
    std::memcpy(d, s, n);
  } else if (dst_host) {
    Kokkos::deep_copy(exec, HostV(d, n), DevV(s, n));
  } else {
    Kokkos::deep_copy(exec, DevV(d, n), HostV(s, n));
  }
}

// Runs the host oracle on arguments in any memory: device tensors are staged through host copies.
template <class ExecSpace, class Args, class Shape>
void run_serial(const ExecSpace& exec, const Args& args, const Shape& shape,
                void (*oracle)(const Shape&, const Args&)) {
  exec.fence();  // the inputs may still be being written by work queued on exec
  if (args.memory == Memory::Host) {
    oracle(shape, args);
    return;
  }
  struct Staged {
    void* device;
    std::vector<char> host;
    bool output;
  };
  std::vector<Staged> staged;
  Args h = args;
  h.memory = Memory::Host;
  for_each_tensor(h, [&](const char*, auto& t, bool output) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(t.data)>>;
    Staged st{const_cast<T*>(t.data), std::vector<char>(static_cast<std::size_t>(t.size()) * sizeof(T)),
              output};
    if (!output) copy_bytes(exec, st.host.data(), true, st.device, false, st.host.size());
    t.data = reinterpret_cast<decltype(t.data)>(st.host.data());
    staged.push_back(std::move(st));
  });
  exec.fence();
  oracle(shape, h);
  for (auto& st : staged)
    if (st.output) copy_bytes(exec, st.device, false, st.host.data(), true, st.host.size());
  exec.fence();
}

// The fast path's verdict on one call: empty when it can take it, else why not.
template <class ExecSpace, class Shape>
std::string cuda_refusal(const Shape& shape, const Options& o) {
#ifdef ATTNBWD_DISPATCH_CUDA
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda>) return cuda::supports(shape, o).reason;
#endif
  (void)shape, (void)o;
  return "this build has no CUDA fast path for this execution space";
}

// Auto: the CUDA fast path when it takes the call, else the portable path.
template <class ExecSpace, class Shape>
Backend resolve(const ExecSpace& exec, const Shape& shape, const Options& o) {
  const Backend b = resolve_backend(exec, o.backend);
  if (b == Backend::Cuda || (o.backend == Backend::Auto && b == Backend::Portable)) {
    const std::string why = cuda_refusal<ExecSpace>(shape, o);
    if (why.empty()) return Backend::Cuda;
    if (b == Backend::Cuda) throw Error("options.backend", "cuda backend cannot run this call: " + why);
  }
  return b;
}

// One op's three implementations, chosen by the resolved backend.
template <class ExecSpace, class Args, class Shape>
Backend run_op(const ExecSpace& exec, const Args& a, const Shape& shape, const Options& o,
            void (*oracle)(const Shape&, const Args&),
            void (*portable)(const ExecSpace&, const Shape&, const Args&, const Options&)) {
  const Backend b = resolve(exec, shape, o);
  switch (b) {
    case Backend::Serial: run_serial(exec, a, shape, oracle); return b;
    case Backend::Portable: portable(exec, shape, a, o); return b;
    case Backend::Cuda:
#ifdef ATTNBWD_DISPATCH_CUDA
      if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda>) {
        cuda::run(shape, a, o, exec.cuda_stream());
        return b;
      }
#endif
      break;
    default: break;
  }
  throw Error("options.backend", "no implementation selected");
}

}  // namespace

template <class ExecSpace>
Backend resolve_backend(const ExecSpace&, Backend requested) {
  if (requested != Backend::Auto) {
    if (requested == Backend::Cuda && host_space<ExecSpace>())
      throw Error("options.backend", "the cuda backend needs a CUDA execution space");
    return requested;
  }
  // Auto on a host space is the portable path; on a CUDA space run_op asks the fast path first.
  return Backend::Portable;
}

template <class ExecSpace>
Backend run(const ExecSpace& exec, const OutProjArgs& a, const Options& o) {
  const OutProjShape s = validate(a);
  return run_op(exec, a, s, o, &serial::out_proj_backward, &portable::out_proj_backward<ExecSpace>);
}

template <class ExecSpace>
Backend run(const ExecSpace& exec, const GqaRopeArgs& a, const Options& o) {
  const GqaRopeShape s = validate(a);
  return run_op(exec, a, s, o, &serial::gqa_rope_backward, &portable::gqa_rope_backward<ExecSpace>);
}

template <class ExecSpace>
Backend run(const ExecSpace& exec, const VisionMhaArgs& a, const Options& o) {
  const VisionMhaShape s = validate(a);
  return run_op(exec, a, s, o, &serial::vision_mha_norm_backward, &portable::vision_mha_norm_backward<ExecSpace>);
}

template <class ExecSpace>
Backend run(const ExecSpace& exec, const VisionVarlenArgs& in, const Options& o) {
  VisionVarlenArgs a = in;
  // Validation needs cu_seqlens on the host; without a host copy from the caller, make one.
  std::vector<std::int32_t> cu_host;
  const bool copy = a.memory == Memory::Device && a.cu_seqlens_host == nullptr && a.cu_seqlens.rank == 1 &&
                    a.cu_seqlens.extent[0] > 0 && a.cu_seqlens.data != nullptr;
#ifdef ATTNBWD_DISPATCH_CUDA
  // The CUDA fast path reads cu_seqlens on the host only to validate it: the arguments but for its values validated
  // first, the copy and the op's first part (scratch only) are queued together, the values validated while that part
  // runs, then the rest queued or, for invalid values, nothing (every output untouched; cuda_backend.hpp, run_begin).
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda>) {
    if (copy && cuda::early_part_wanted()) {
      const VisionVarlenShape s = validate_varlen_layout(a);
      if (resolve(exec, s, o) == Backend::Cuda) {
        cu_host.resize(static_cast<std::size_t>(s.num_sequences + 1));
        cuda::run_begin(s, a, o, exec.cuda_stream());
        try {
          cuda::run_host_copy(cu_host.data(), s.num_sequences + 1);
          validate_cu_seqlens(s, cu_host.data());
        } catch (...) {
          cuda::run_abandon(exec.cuda_stream());
          throw;
        }
        a.cu_seqlens_host = cu_host.data();
        cuda::run_finish(s, a, o, exec.cuda_stream());
        return Backend::Cuda;
      }
    }
  }
#endif
  if (copy) {
    cu_host.resize(static_cast<std::size_t>(a.cu_seqlens.extent[0]));
    copy_bytes(exec, cu_host.data(), true, a.cu_seqlens.data, false, cu_host.size() * sizeof(std::int32_t));
    exec.fence();
    a.cu_seqlens_host = cu_host.data();
  }
  const VisionVarlenShape s = validate(a);
  return run_op(exec, a, s, o, &serial::vision_varlen_rope_backward, &portable::vision_varlen_rope_backward<ExecSpace>);
}

#define ATTNBWD_INSTANTIATE(SPACE)                                                  \
  template Backend resolve_backend<SPACE>(const SPACE&, Backend);                   \
  template Backend run<SPACE>(const SPACE&, const OutProjArgs&, const Options&);    \
  template Backend run<SPACE>(const SPACE&, const GqaRopeArgs&, const Options&);    \
  template Backend run<SPACE>(const SPACE&, const VisionMhaArgs&, const Options&);  \
  template Backend run<SPACE>(const SPACE&, const VisionVarlenArgs&, const Options&);

#ifdef KOKKOS_ENABLE_SERIAL
ATTNBWD_INSTANTIATE(Kokkos::Serial)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
ATTNBWD_INSTANTIATE(Kokkos::OpenMP)
#endif
#ifdef KOKKOS_ENABLE_THREADS
ATTNBWD_INSTANTIATE(Kokkos::Threads)
#endif
#ifdef KOKKOS_ENABLE_CUDA
ATTNBWD_INSTANTIATE(Kokkos::Cuda)
#endif

}  // namespace attnbwd::detail
