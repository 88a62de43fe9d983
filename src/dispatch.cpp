// Backend selection for every operation and execution space. Validation happens here, before any
// backend touches an output.
#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "args_visit.hpp"
#include "attnbwd/detail/views.hpp"
#include "attnbwd/error.hpp"
#include "serial/serial.hpp"

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

template <class ExecSpace>
Backend resolve(const ExecSpace& exec, Backend requested) {
  const Backend b = resolve_backend(exec, requested);
  if (b == Backend::Portable)
    throw Error("options.backend", "the portable backend is not built yet (issue: portable path)");
  if (b == Backend::Cuda)
    throw Error("options.backend", "the cuda backend is not built yet (issue: CUDA fast path)");
  return b;
}

template <class ExecSpace, class Args, class Shape>
void run_op(const ExecSpace& exec, const Args& a, const Shape& shape, const Options& o,
            void (*oracle)(const Shape&, const Args&)) {
  switch (resolve(exec, o.backend)) {
    case Backend::Serial: run_serial(exec, a, shape, oracle); return;
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
  // Until the portable and CUDA paths land, Auto means the oracle on host spaces.
  if (host_space<ExecSpace>()) return Backend::Serial;
  throw Error("options.backend", "no backend for this execution space in this build yet; "
                                 "request Backend::Serial to run the host oracle on staged copies");
}

template <class ExecSpace>
void run(const ExecSpace& exec, const OutProjArgs& a, const Options& o) {
  const OutProjShape s = validate(a);
  run_op(exec, a, s, o, &serial::out_proj_backward);
}

template <class ExecSpace>
void run(const ExecSpace& exec, const GqaRopeArgs& a, const Options& o) {
  const GqaRopeShape s = validate(a);
  run_op(exec, a, s, o, &serial::gqa_rope_backward);
}

template <class ExecSpace>
void run(const ExecSpace& exec, const VisionMhaArgs& a, const Options& o) {
  const VisionMhaShape s = validate(a);
  run_op(exec, a, s, o, &serial::vision_mha_norm_backward);
}

template <class ExecSpace>
void run(const ExecSpace& exec, const VisionVarlenArgs& in, const Options& o) {
  VisionVarlenArgs a = in;
  // Validation needs cu_seqlens on the host; without a host copy from the caller, make one.
  std::vector<std::int32_t> cu_host;
  if (a.memory == Memory::Device && a.cu_seqlens_host == nullptr && a.cu_seqlens.rank == 1 &&
      a.cu_seqlens.extent[0] > 0 && a.cu_seqlens.data != nullptr) {
    cu_host.resize(static_cast<std::size_t>(a.cu_seqlens.extent[0]));
    copy_bytes(exec, cu_host.data(), true, a.cu_seqlens.data, false, cu_host.size() * sizeof(std::int32_t));
    exec.fence();
    a.cu_seqlens_host = cu_host.data();
  }
  const VisionVarlenShape s = validate(a);
  run_op(exec, a, s, o, &serial::vision_varlen_rope_backward);
}

#define ATTNBWD_INSTANTIATE(SPACE)                                                  \
  template Backend resolve_backend<SPACE>(const SPACE&, Backend);                   \
  template void run<SPACE>(const SPACE&, const OutProjArgs&, const Options&);       \
  template void run<SPACE>(const SPACE&, const GqaRopeArgs&, const Options&);       \
  template void run<SPACE>(const SPACE&, const VisionMhaArgs&, const Options&);     \
  template void run<SPACE>(const SPACE&, const VisionVarlenArgs&, const Options&);

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
