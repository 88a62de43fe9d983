// Copies of an operation's arguments in an execution space's memory, for running any backend on
// any enabled space from host-side test data.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <gtest/gtest.h>

#include "args_visit.hpp"
#include "attnbwd/args.hpp"

namespace attnbwd::test {

// Every Kokkos execution space enabled in this build, for typed tests.
using ExecSpaces = ::testing::Types<Kokkos::DefaultHostExecutionSpace
#if defined(KOKKOS_ENABLE_SERIAL) && (defined(KOKKOS_ENABLE_OPENMP) || defined(KOKKOS_ENABLE_THREADS))
                                    ,
                                    Kokkos::Serial
#endif
#ifdef KOKKOS_ENABLE_CUDA
                                    ,
                                    Kokkos::Cuda
#endif
                                    >;

template <class T>
std::size_t bytes_of(const Tensor<T>& t) {
  return static_cast<std::size_t>(t.size()) * sizeof(T);
}

template <class T>
void* raw(const Tensor<T>& t) {
  return const_cast<void*>(static_cast<const void*>(t.data));
}

// `args` with every tensor copied into ExecSpace's memory (outputs copied too, so poison travels).
template <class ExecSpace, class Args>
class DeviceArgs {
  using Bytes = Kokkos::View<unsigned char*, typename ExecSpace::memory_space>;
  using HostBytes = Kokkos::View<unsigned char*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

 public:
  explicit DeviceArgs(const Args& host) : args(host) {
    args.memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename ExecSpace::memory_space>::accessible
                      ? Memory::Host
                      : Memory::Device;
    detail::for_each_tensor(args, [&](const char* name, auto& t, bool) {
      Bytes b(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(name)), bytes_of(t));
      Kokkos::deep_copy(b, HostBytes(static_cast<unsigned char*>(raw(t)), bytes_of(t)));
      t.data = reinterpret_cast<decltype(t.data)>(b.data());
      buffers_.push_back(b);
    });
    if constexpr (std::is_same_v<Args, VisionVarlenArgs>) args.cu_seqlens_host = host.cu_seqlens_host;
  }

  // Copies every output back into the host arguments `host` this was made from.
  void outputs_to(Args& host) const {
    std::size_t i = 0;
    detail::for_each_tensor(host, [&](const char*, auto& t, bool output) {
      if (output) Kokkos::deep_copy(HostBytes(static_cast<unsigned char*>(raw(t)), bytes_of(t)), buffers_[i]);
      ++i;
    });
  }

  Args args;

 private:
  std::vector<Bytes> buffers_;
};

// Fills every output with NaN (bf16 and float alike: 0xFF bytes are NaN in both).
template <class Args>
void poison_outputs(Args& a) {
  detail::for_each_tensor(a, [&](const char*, auto& t, bool output) {
    if (output) std::memset(raw(t), 0xFF, bytes_of(t));
  });
}

}  // namespace attnbwd::test
