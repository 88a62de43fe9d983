// Concurrent calls from several host threads, each with its own inputs and outputs, must give the
// results of the same calls made one after another.
//
// What Kokkos 3.4 allows, and so what is tested:
//   * the serial oracle (Backend::Serial) on host memory runs no Kokkos kernel (only a fence, a no-op
//     on host spaces): any number of threads may call it at once, with Kokkos::DefaultHostExecutionSpace
//     or Kokkos::Serial instances. Tested with 4 threads on each space.
//   * the portable path may run on one thread at a time only, and on OpenMP only from the thread that
//     initialised Kokkos: Kokkos::Serial keeps one process-wide team-scratch / reduction buffer
//     (serial_get_thread_team_data) shared by every caller, and Kokkos::OpenMP one thread pool whose
//     instance pointer is set on the initialising thread only (t_openmp_instance). Tested: the portable
//     path on the main thread (OpenMP and Serial) while 3 threads run the oracle.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/seed.hpp"
#include "tests/reliability/cases.hpp"

namespace attnbwd::test::rel {
namespace {

constexpr int kThreads = 4;
constexpr int kRepeats = 8;

template <class ExecSpace, class Args>
void run_on(const Args& a, Backend b) {
  Options o;
  o.backend = b;
  detail::run(ExecSpace(), a, o);
}

// Per thread: its own case, its sequential result, and what it saw.
template <class Params>
struct Worker {
  Worker(std::uint64_t seed) : c(small(Params{}), seed) {}
  Case<Params> c;
  std::vector<unsigned char> want;
  std::string error;
};

template <class Params, class ExecSpace>
void oracle_from_threads(int threads, bool portable_on_main) {
  std::vector<std::unique_ptr<Worker<Params>>> w;
  for (int t = 0; t < threads; ++t) {
    w.push_back(std::make_unique<Worker<Params>>(fresh_seed(400 + t)));
    run_on<ExecSpace>(w.back()->c.args, Backend::Serial);  // sequential reference
    w.back()->want = w.back()->c.arena.outputs();
    w.back()->c.arena.fill_outputs(0xFF);
  }
  // The portable path's own sequential result, for the main thread.
  std::unique_ptr<Worker<Params>> main_w;
  if (portable_on_main) {
    main_w = std::make_unique<Worker<Params>>(fresh_seed(499));
    run_on<ExecSpace>(main_w->c.args, Backend::Portable);
    main_w->want = main_w->c.arena.outputs();
  }
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      Worker<Params>& me = *w[static_cast<std::size_t>(t)];
      ready.fetch_add(1);
      while (ready.load() < threads + (portable_on_main ? 1 : 0)) std::this_thread::yield();
      try {
        for (int i = 0; i < kRepeats && me.error.empty(); ++i) {
          me.c.arena.fill_outputs(i % 2 ? 0x00 : 0xFF);
          run_on<ExecSpace>(me.c.args, Backend::Serial);
          if (me.c.arena.outputs() != me.want) me.error = "repeat " + std::to_string(i) + " differs";
        }
      } catch (const std::exception& e) {
        me.error = e.what();
      }
    });
  if (portable_on_main) {
    ready.fetch_add(1);
    while (ready.load() < threads + 1) std::this_thread::yield();
    for (int i = 0; i < kRepeats && main_w->error.empty(); ++i) {
      main_w->c.arena.fill_outputs(i % 2 ? 0x00 : 0xFF);
      run_on<ExecSpace>(main_w->c.args, Backend::Portable);
      if (main_w->c.arena.outputs() != main_w->want)
        main_w->error = "portable repeat " + std::to_string(i) + " differs";
    }
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(w[static_cast<std::size_t>(t)]->error, "") << "thread " << t;
  if (main_w) EXPECT_EQ(main_w->error, "") << "main thread (portable)";
}

template <class Params>
class Concurrency : public ::testing::Test {};
using AllParams = ::testing::Types<OutProjParams, GqaParams, MhaParams, VarlenParams>;
TYPED_TEST_SUITE(Concurrency, AllParams);

TYPED_TEST(Concurrency, OracleFromFourThreadsMatchesSequential) {
  ATTNBWD_SEED_TRACE();
  {
    SCOPED_TRACE(Kokkos::DefaultHostExecutionSpace::name());
    oracle_from_threads<TypeParam, Kokkos::DefaultHostExecutionSpace>(kThreads, false);
  }
#if defined(KOKKOS_ENABLE_SERIAL)
  SCOPED_TRACE("Serial");
  oracle_from_threads<TypeParam, Kokkos::Serial>(kThreads, false);
#endif
}

TYPED_TEST(Concurrency, PortableOnMainThreadWhileThreeThreadsRunTheOracle) {
  ATTNBWD_SEED_TRACE();
  {
    SCOPED_TRACE(Kokkos::DefaultHostExecutionSpace::name());
    oracle_from_threads<TypeParam, Kokkos::DefaultHostExecutionSpace>(kThreads - 1, true);
  }
#if defined(KOKKOS_ENABLE_SERIAL)
  SCOPED_TRACE("Serial");
  oracle_from_threads<TypeParam, Kokkos::Serial>(kThreads - 1, true);
#endif
}

}  // namespace
}  // namespace attnbwd::test::rel
