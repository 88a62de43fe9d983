// Building blocks of the portable path, written once against Kokkos and templated on the execution
// space: unmanaged Views over the pointer-level arguments, workspace, bf16 <-> fp32 conversion
// kernels and row-major GEMMs through Kokkos Kernels (cuBLAS on CUDA when its TPL is on).
#pragma once

#include <Kokkos_Core.hpp>
#include <KokkosBlas3_gemm.hpp>

#include <cstdint>

#include "attnbwd/args.hpp"
#include "attnbwd/bf16.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd::portable {

template <class ExecSpace>
using MemSpace = typename ExecSpace::memory_space;

// A row-major unmanaged View over memory the caller owns. Its device names ExecSpace itself, not only its memory
// space, so that the View's execution space is ExecSpace's (Kokkos Kernels keys its GEMM on it: see gemm).
template <class T, class ExecSpace>
using Unmanaged = Kokkos::View<T, Kokkos::LayoutRight, Kokkos::Device<ExecSpace, MemSpace<ExecSpace>>,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Workspace owned by one call (allocated without initialisation: every kernel writes what it reads).
template <class T, class ExecSpace>
using Work = Kokkos::View<T*, Kokkos::LayoutRight, MemSpace<ExecSpace>>;

template <class T, class ExecSpace>
Work<T, ExecSpace> workspace(const ExecSpace& exec, const char* label, std::int64_t n) {
  return Work<T, ExecSpace>(Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, std::string(label)),
                            static_cast<std::size_t>(n));
}

// bf16 -> fp32, exact.
template <class ExecSpace>
void upcast(const ExecSpace& exec, const bf16* src, float* dst, std::int64_t n) {
  Kokkos::parallel_for(
      "attnbwd::upcast", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) { dst[i] = src[i].to_float(); });
}

// fp32 -> bf16, round to nearest even (the reference's one rounding of a GEMM result).
template <class ExecSpace>
void round_to_bf16(const ExecSpace& exec, const float* src, bf16* dst, std::int64_t n) {
  Kokkos::parallel_for(
      "attnbwd::round_to_bf16", Kokkos::RangePolicy<ExecSpace>(exec, 0, n),
      KOKKOS_LAMBDA(const std::int64_t i) { dst[i] = bf16(src[i]); });
}

// C[M,N] = alpha·op(A)·op(B) + beta·C, all row-major and contiguous: A is [M,K] (or [K,M] with
// trans_a), B is [K,N] (or [N,K] with trans_b). float or double.
// Kokkos Kernels before 4.0 has no execution-space argument: the GEMM then runs on the space's
// default instance, so `exec` is fenced before it and the default instance after it.
// The Views' execution space is `exec`'s (Unmanaged) under every Kokkos Kernels signature (3.4: the GEMM
// runs on the views' space; 4.0: `exec` must be the views' execution_space; 4.1+: ETI and TPL lookups key
// on the device).
template <class ExecSpace, class T>
void gemm(const ExecSpace& exec, bool trans_a, bool trans_b, std::int64_t M, std::int64_t N,
          std::int64_t K, T alpha, const T* A, const T* B, T beta, T* C) {
  using CV = Unmanaged<const T**, ExecSpace>;
  using V = Unmanaged<T**, ExecSpace>;
  CV a(A, trans_a ? K : M, trans_a ? M : K);
  CV b(B, trans_b ? N : K, trans_b ? K : N);
  V c(C, M, N);
  const char* ta = trans_a ? "T" : "N";
  const char* tb = trans_b ? "T" : "N";
#if KOKKOS_VERSION >= 40000
  KokkosBlas::gemm(exec, ta, tb, alpha, a, b, beta, c);
#else
  exec.fence();
  KokkosBlas::gemm(ta, tb, alpha, a, b, beta, c);
  ExecSpace().fence();
#endif
}

}  // namespace attnbwd::portable
