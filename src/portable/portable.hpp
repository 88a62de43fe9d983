// The portable path: each operation written once against Kokkos (TeamPolicy kernels with team scratch,
// Kokkos Kernels GEMMs), templated on the execution space and instantiated in its own source file for
// every execution space enabled in the Kokkos build (ATTNBWD_PORTABLE_INSTANTIATE).
//
// Each function expects validated arguments (attnbwd::validate) in `exec`'s memory space, runs
// asynchronously on `exec` where Kokkos allows, and writes every element of every output.
#pragma once

#include "attnbwd/args.hpp"
#include "attnbwd/options.hpp"

namespace attnbwd::portable {

template <class ExecSpace>
void out_proj_backward(const ExecSpace& exec, const OutProjShape& s, const OutProjArgs& a, const Options& o);
template <class ExecSpace>
void gqa_rope_backward(const ExecSpace& exec, const GqaRopeShape& s, const GqaRopeArgs& a, const Options& o);
template <class ExecSpace>
void vision_mha_norm_backward(const ExecSpace& exec, const VisionMhaShape& s, const VisionMhaArgs& a,
                              const Options& o);
template <class ExecSpace>
void vision_varlen_rope_backward(const ExecSpace& exec, const VisionVarlenShape& s,
                                 const VisionVarlenArgs& a, const Options& o);

}  // namespace attnbwd::portable

// Explicit instantiation of one op for every enabled execution space; used once per op source file.
#define ATTNBWD_PORTABLE_INSTANTIATE_ONE(OP, SHAPE, ARGS, SPACE) \
  template void OP<SPACE>(const SPACE&, const SHAPE&, const ARGS&, const Options&);

#if defined(KOKKOS_ENABLE_SERIAL)
#define ATTNBWD_PORTABLE_SERIAL(OP, SHAPE, ARGS) ATTNBWD_PORTABLE_INSTANTIATE_ONE(OP, SHAPE, ARGS, Kokkos::Serial)
#else
#define ATTNBWD_PORTABLE_SERIAL(OP, SHAPE, ARGS)
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
#define ATTNBWD_PORTABLE_OPENMP(OP, SHAPE, ARGS) ATTNBWD_PORTABLE_INSTANTIATE_ONE(OP, SHAPE, ARGS, Kokkos::OpenMP)
#else
#define ATTNBWD_PORTABLE_OPENMP(OP, SHAPE, ARGS)
#endif
#if defined(KOKKOS_ENABLE_THREADS)
#define ATTNBWD_PORTABLE_THREADS(OP, SHAPE, ARGS) ATTNBWD_PORTABLE_INSTANTIATE_ONE(OP, SHAPE, ARGS, Kokkos::Threads)
#else
#define ATTNBWD_PORTABLE_THREADS(OP, SHAPE, ARGS)
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#define ATTNBWD_PORTABLE_CUDA(OP, SHAPE, ARGS) ATTNBWD_PORTABLE_INSTANTIATE_ONE(OP, SHAPE, ARGS, Kokkos::Cuda)
#else
#define ATTNBWD_PORTABLE_CUDA(OP, SHAPE, ARGS)
#endif

#define ATTNBWD_PORTABLE_INSTANTIATE(OP, SHAPE, ARGS) \
  ATTNBWD_PORTABLE_SERIAL(OP, SHAPE, ARGS)            \
  ATTNBWD_PORTABLE_OPENMP(OP, SHAPE, ARGS)            \
  ATTNBWD_PORTABLE_THREADS(OP, SHAPE, ARGS)           \
  ATTNBWD_PORTABLE_CUDA(OP, SHAPE, ARGS)
