// Kokkos View -> Tensor conversion and the per-execution-space entry points compiled into the library.
#pragma once

#include <Kokkos_Core.hpp>

#include "attnbwd/args.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd::detail {

// The View types of the public API: row-major, in the execution space's memory space.
template <class T, class MemorySpace>
using View = Kokkos::View<T, Kokkos::LayoutRight, MemorySpace>;

template <class MemorySpace>
constexpr Memory memory_of() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemorySpace>::accessible ? Memory::Host
                                                                                : Memory::Device;
}

// Rank is given explicitly (the public structs fix it) so this works the same on Kokkos 3.4 to 5.
template <int Rank, class V>
Tensor<typename V::value_type> tensor(const V& v) {
  Tensor<typename V::value_type> t;
  t.data = v.data();
  t.rank = Rank;
  for (int i = 0; i < Rank; ++i) t.extent[i] = static_cast<std::int64_t>(v.extent(i));
  t.contiguous = v.span_is_contiguous();
  return t;
}

// Compiled into the library for each enabled Kokkos execution space (explicit instantiations in
// src/dispatch.cpp). They validate, choose the backend, run it on `exec`'s stream/instance and return
// the backend that ran.
template <class ExecSpace>
Backend run(const ExecSpace& exec, const OutProjArgs& a, const Options& o);
template <class ExecSpace>
Backend run(const ExecSpace& exec, const GqaRopeArgs& a, const Options& o);
template <class ExecSpace>
Backend run(const ExecSpace& exec, const VisionMhaArgs& a, const Options& o);
template <class ExecSpace>
Backend run(const ExecSpace& exec, const VisionVarlenArgs& a, const Options& o);

// The backend a request resolves to for this execution space before the op is known: Auto gives
// Portable here, and on a CUDA space the op's run() may still take the CUDA fast path.
template <class ExecSpace>
Backend resolve_backend(const ExecSpace& exec, Backend requested);

}  // namespace attnbwd::detail
