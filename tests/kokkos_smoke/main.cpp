// Smoke test for the Kokkos / Kokkos Kernels installs made by
// cmake/deps/build-deps.sh.  Exercises, on Kokkos::DefaultExecutionSpace:
//   1. a parallel_reduce over 1<<24 elements,
//   2. a TeamPolicy kernel that stages data through team scratch memory,
//   3. KokkosBlas::gemm (cuBLAS in the cuda config) checked against a host
//      triple loop,
//   4. Kokkos::Experimental::half_t conversions,
//   5. (CUDA only) a CudaUVMSpace view, whose init prefetches managed memory.
// Prints "KOKKOS SMOKE OK" and returns 0 on success; returns 1 on any
// mismatch.
#include <Kokkos_Core.hpp>
#include <KokkosBlas3_gemm.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>

namespace {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace  = ExecSpace::memory_space;

// 1. Flat reduction: sum_{i<n} (i % 1000) computed in 64-bit integers.
int check_reduce() {
  const std::int64_t n = std::int64_t(1) << 24;
  std::int64_t sum     = 0;
  Kokkos::parallel_reduce(
      "smoke_reduce", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const std::int64_t i, std::int64_t& acc) {
        acc += i % 1000;
      },
      sum);
  // n = q*1000 + r:  q full periods of 0..999 plus 0..r-1.
  const std::int64_t q = n / 1000, r = n % 1000;
  const std::int64_t expect = q * (999 * 1000 / 2) + r * (r - 1) / 2;
  std::printf("[reduce] n=%lld sum=%lld expect=%lld\n",
              static_cast<long long>(n), static_cast<long long>(sum),
              static_cast<long long>(expect));
  return sum == expect ? 0 : 1;
}

// 2. Team scratch: each team copies its chunk of x into level-0 scratch,
// barriers, then reduces the chunk read back in *reverse* order with a
// position-dependent weight (so each value crosses threads via scratch).
int check_team_scratch() {
  using Policy      = Kokkos::TeamPolicy<ExecSpace>;
  using Member      = Policy::member_type;
  using ScratchView = Kokkos::View<double*, ExecSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  const int league = 512;
  const int chunk  = 256;

  Kokkos::View<double*, MemSpace> x("x", league * chunk);
  Kokkos::View<double*, MemSpace> out("out", league);
  Kokkos::parallel_for(
      "smoke_fill", Kokkos::RangePolicy<ExecSpace>(0, league * chunk),
      KOKKOS_LAMBDA(const int i) { x(i) = double(i % 17) - 8.0; });

  const size_t bytes = ScratchView::shmem_size(chunk);
  Policy policy(league, Kokkos::AUTO);
  policy.set_scratch_size(0, Kokkos::PerTeam(bytes));

  Kokkos::parallel_for(
      "smoke_team_scratch", policy, KOKKOS_LAMBDA(const Member& team) {
        ScratchView s(team.team_scratch(0), chunk);
        const int base = team.league_rank() * chunk;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, chunk),
                             [&](const int j) { s(j) = x(base + j); });
        team.team_barrier();
        double t = 0.0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, chunk),
            [&](const int j, double& acc) {
              acc += s(chunk - 1 - j) * double(j % 3 + 1);
            },
            t);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          out(team.league_rank()) = t;
        });
      });

  auto h_out = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  int bad    = 0;
  for (int l = 0; l < league; ++l) {
    double e = 0.0;
    for (int j = 0; j < chunk; ++j) {
      const int i = l * chunk + (chunk - 1 - j);
      e += (double(i % 17) - 8.0) * double(j % 3 + 1);
    }
    if (h_out(l) != e) {  // small integers: exact in double
      if (bad < 5)
        std::printf("[team] mismatch league %d: got %g expect %g\n", l,
                    h_out(l), e);
      ++bad;
    }
  }
  std::printf("[team] league=%d chunk=%d scratch=%zu B: %s\n", league, chunk,
              bytes, bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}

// 3. KokkosBlas::gemm: C = alpha * op(A) * B + beta * C, LayoutLeft doubles.
int check_gemm(const char* transA) {
  using Mat = Kokkos::View<double**, Kokkos::LayoutLeft, MemSpace>;
  const int M = 37, N = 29, K = 41;
  const bool tA = (transA[0] == 'T');
  const double alpha = 1.5, beta = 0.5;

  Mat A("A", tA ? K : M, tA ? M : K), B("B", K, N), C("C", M, N);
  // create_mirror (not _view): always a separate host copy, so hC keeps the
  // input C even when C itself lives in HostSpace.
  auto hA = Kokkos::create_mirror(A);
  auto hB = Kokkos::create_mirror(B);
  auto hC = Kokkos::create_mirror(C);
  for (int i = 0; i < int(hA.extent(0)); ++i)
    for (int j = 0; j < int(hA.extent(1)); ++j)
      hA(i, j) = double((7 * i + 3 * j) % 11 - 5) / 4.0;
  for (int i = 0; i < K; ++i)
    for (int j = 0; j < N; ++j) hB(i, j) = double((5 * i + 2 * j) % 13 - 6) / 8.0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) hC(i, j) = double((i + j) % 5);
  Kokkos::deep_copy(A, hA);
  Kokkos::deep_copy(B, hB);
  Kokkos::deep_copy(C, hC);

  KokkosBlas::gemm(transA, "N", alpha, A, B, beta, C);
  ExecSpace().fence();

  auto got  = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), C);
  int bad   = 0;
  double md = 0.0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int k = 0; k < K; ++k) acc += (tA ? hA(k, i) : hA(i, k)) * hB(k, j);
      const double e = alpha * acc + beta * hC(i, j);
      const double d = std::fabs(got(i, j) - e);
      md             = d > md ? d : md;
      if (!(d <= 1e-10 * (1.0 + std::fabs(e)))) {
        if (bad < 5)
          std::printf("[gemm %s] mismatch (%d,%d): got %.17g expect %.17g\n",
                      transA, i, j, got(i, j), e);
        ++bad;
      }
    }
  std::printf("[gemm %sN] %dx%dx%d max|diff|=%g: %s\n", transA, M, N, K, md,
              bad ? "FAIL" : "ok");
  return bad ? 1 : 0;
}

// 4. half_t round trips (exercises the patched CUDA half conversions):
// integers 0..2047 are exact in binary16.
int check_half() {
  using half = Kokkos::Experimental::half_t;
  const int n = 2048;
  Kokkos::View<int, MemSpace> bad("bad");
  Kokkos::parallel_for(
      "smoke_half", Kokkos::RangePolicy<ExecSpace>(0, n),
      KOKKOS_LAMBDA(const int i) {
        const half h = static_cast<half>(static_cast<float>(i));
        const bool ok = static_cast<float>(h) == float(i) &&
                        static_cast<double>(h) == double(i) &&
                        static_cast<int>(h) == i &&
                        static_cast<long long>(h) == i &&
                        static_cast<unsigned>(h) == unsigned(i) &&
                        static_cast<bool>(h) == (i != 0);
        if (!ok) Kokkos::atomic_add(&bad(), 1);  // atomic_increment is deprecated in Kokkos 4.5
      });
  int h_bad = 0;
  Kokkos::deep_copy(h_bad, bad);
  std::printf("[half] %d values, %d bad: %s\n", n, h_bad, h_bad ? "FAIL" : "ok");
  return h_bad ? 1 : 0;
}

#ifdef KOKKOS_ENABLE_CUDA
// 5. A small CudaUVMSpace view: its initialization goes through
// cudaMemPrefetchAsync (the CUDA 13 signature hunk of the patch).
int check_uvm() {
  const int n = 1 << 17;  // 1 MiB of managed memory
  Kokkos::View<double*, Kokkos::CudaUVMSpace> u("u", n);
  Kokkos::parallel_for(
      "smoke_uvm", Kokkos::RangePolicy<Kokkos::Cuda>(0, n),
      KOKKOS_LAMBDA(const int i) { u(i) += double(i % 10); });
  Kokkos::fence();
  double s = 0.0, e = 0.0;
  for (int i = 0; i < n; ++i) {
    s += u(i);  // host reads managed memory
    e += double(i % 10);
  }
  std::printf("[uvm] sum=%.1f expect=%.1f: %s\n", s, e, s == e ? "ok" : "FAIL");
  return s == e ? 0 : 1;
}
#endif

}  // namespace

int main(int argc, char* argv[]) {
  int failures = 0;
  Kokkos::initialize(argc, argv);
  {
    std::printf("DefaultExecutionSpace: %s\n", ExecSpace::name());
    std::printf("DefaultHostExecutionSpace: %s\n",
                Kokkos::DefaultHostExecutionSpace::name());
    std::printf("Compiled GPU arch macro: %s\n",
#if defined(KOKKOS_ARCH_HOPPER90)
                "KOKKOS_ARCH_HOPPER90"
#elif defined(KOKKOS_ARCH_AMPERE80)
                "KOKKOS_ARCH_AMPERE80"
#elif defined(KOKKOS_ARCH_AMPERE86)
                "KOKKOS_ARCH_AMPERE86"
#else
                "(none)"
#endif
    );
    Kokkos::print_configuration(std::cout, true);
    std::cout.flush();

    failures += check_reduce();
    failures += check_team_scratch();
    failures += check_gemm("N");
    failures += check_gemm("T");
    failures += check_half();
#ifdef KOKKOS_ENABLE_CUDA
    failures += check_uvm();
#endif
  }
  Kokkos::finalize();

  if (failures) {
    std::printf("KOKKOS SMOKE FAILED (%d check(s))\n", failures);
    return 1;
  }
  std::printf("KOKKOS SMOKE OK\n");
  return 0;
}
