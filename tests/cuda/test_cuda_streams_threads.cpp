// The CUDA fast path under concurrency (issue 10), for every op that has one:
//   * four host threads, each with its own stream (and so its own per-thread Context), calling the op
//     at once on their own device buffers, give the bits of a sequential call;
//   * one thread issuing the op on four streams without waiting in between (one Context: the calls
//     serialise through Context::claim/release) gives the same bits on every stream.
// The fast path's entry points are called directly (POD arguments, raw streams), so Kokkos' own
// thread-safety rules do not enter; device copies are made and read back on the main thread.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attnbwd/attnbwd.hpp"
#include "tests/common/device_args.hpp"
#include "tests/common/host_case.hpp"
#include "tests/common/seed.hpp"
#include "tools/gen.hpp"

#if defined(KOKKOS_ENABLE_CUDA) && defined(ATTNBWD_HAVE_CUDA_FAST_PATH)

#include <cuda_runtime_api.h>

#include "cuda/context.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/stages.hpp"
#include "tests/common/cuda_case.hpp"  // expect_same_bits
#include "tests/common/scoped_env.hpp"

namespace attnbwd::test {
namespace {

constexpr int kWays = 4;

void check_cuda(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

// One case's inputs, a sequential reference result, and kWays device copies.
template <class Args>
struct Setup {
  Setup(const char* op, const tools::Axes& axes, std::uint64_t seed)
      : in(tools::generate_inputs(op, axes, seed, tools::default_scalars(op))), axes(axes) {}

  // Runs the fast path once on device copies of `host` on `stream`; results back into `host`.
  static void run_once(HostCase<Args>& host, cudaStream_t stream) {
    DeviceArgs<Kokkos::Cuda, Args> d(host.args);
    Kokkos::fence();
    const auto shape = validate(d.args);
    ASSERT_TRUE(cuda::supports(shape, Options{})) << "fast path refused the test shape";
    cuda::run(shape, d.args, Options{}, stream);
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    d.outputs_to(host.args);
  }

  tools::TensorSet in;
  tools::Axes axes;
};

// Runs body(t) for t < kWays on kWays threads that start it together, each after cudaSetDevice(device); returns each
// thread's exception text ("" where none).
std::vector<std::string> on_threads(int device, const std::function<void(int)>& body) {
  std::vector<std::string> errors(kWays);
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kWays; ++t) {
    pool.emplace_back([&, t] {
      try {
        if (cudaSetDevice(device) != cudaSuccess) throw Error("cudaSetDevice failed");
        ++ready;
        while (ready.load() < kWays) std::this_thread::yield();
        body(t);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(t)] = e.what();
      }
    });
  }
  for (auto& th : pool) th.join();
  return errors;
}

// Each thread's outputs (dev[t], copied into got[t]) have `want`'s bits, and no thread failed.
template <class Args>
void expect_threads_match(const std::vector<std::string>& errors,
                          const std::vector<std::unique_ptr<HostCase<Args>>>& got,
                          const std::vector<std::unique_ptr<DeviceArgs<Kokkos::Cuda, Args>>>& dev,
                          const HostCase<Args>& want) {
  for (int t = 0; t < kWays; ++t) {
    const std::size_t i = static_cast<std::size_t>(t);
    EXPECT_EQ(errors[i], "") << "thread " << t;
    dev[i]->outputs_to(got[i]->args);
    expect_same_bits(*got[i], want, "thread " + std::to_string(t) + " vs the sequential call");
  }
}

template <class Args>
void threads_and_streams(const char* op, const tools::Axes& axes, std::uint64_t seed) {
  SCOPED_TRACE(std::string(op) + " " + tools::axes_to_string(axes));
  Setup<Args> s(op, axes, seed);
  HostCase<Args> want(s.in, s.axes);
  {
    cudaStream_t st = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    Setup<Args>::run_once(want, st);
    check_cuda(cudaStreamDestroy(st), "cudaStreamDestroy");
  }
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");

  // Four threads at once, each its own stream and device buffers (made here, on the main thread).
  {
    std::vector<std::unique_ptr<HostCase<Args>>> got;
    std::vector<std::unique_ptr<DeviceArgs<Kokkos::Cuda, Args>>> dev;
    for (int t = 0; t < kWays; ++t) {
      got.push_back(std::make_unique<HostCase<Args>>(s.in, s.axes));
      dev.push_back(std::make_unique<DeviceArgs<Kokkos::Cuda, Args>>(got.back()->args));
    }
    Kokkos::fence();
    const std::vector<std::string> errors = on_threads(device, [&](int t) {
      cudaStream_t st = nullptr;
      if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) throw Error("stream");
      const auto shape = validate(dev[static_cast<std::size_t>(t)]->args);
      for (int rep = 0; rep < 3; ++rep) cuda::run(shape, dev[static_cast<std::size_t>(t)]->args, Options{}, st);
      if (cudaStreamSynchronize(st) != cudaSuccess) throw Error("cudaStreamSynchronize failed");
      cudaStreamDestroy(st);
    });
    expect_threads_match(errors, got, dev, want);
  }

  // One thread, four streams, no waiting between the calls.
  {
    std::vector<std::unique_ptr<HostCase<Args>>> got;
    std::vector<std::unique_ptr<DeviceArgs<Kokkos::Cuda, Args>>> dev;
    std::vector<cudaStream_t> streams(kWays);
    for (int t = 0; t < kWays; ++t) {
      got.push_back(std::make_unique<HostCase<Args>>(s.in, s.axes));
      dev.push_back(std::make_unique<DeviceArgs<Kokkos::Cuda, Args>>(got.back()->args));
      check_cuda(cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(t)], cudaStreamNonBlocking),
                 "cudaStreamCreate");
    }
    Kokkos::fence();
    for (int rep = 0; rep < 2; ++rep)
      for (int t = 0; t < kWays; ++t) {
        const auto& a = dev[static_cast<std::size_t>(t)]->args;
        cuda::run(validate(a), a, Options{}, streams[static_cast<std::size_t>(t)]);
      }
    for (int t = 0; t < kWays; ++t) {
      check_cuda(cudaStreamSynchronize(streams[static_cast<std::size_t>(t)]), "cudaStreamSynchronize");
      check_cuda(cudaStreamDestroy(streams[static_cast<std::size_t>(t)]), "cudaStreamDestroy");
      dev[static_cast<std::size_t>(t)]->outputs_to(got[static_cast<std::size_t>(t)]->args);
      expect_same_bits(*got[static_cast<std::size_t>(t)], want, "stream " + std::to_string(t) + " vs the sequential call");
    }
  }
}

TEST(CudaConcurrency, OutProjFromFourThreadsAndFourStreams) {
  ATTNBWD_SEED_TRACE();
  // T = 1024 at hidden 2048: on sm_90 the TMA/wgmma kernel (no split-K); T = 256: split-K there.
  threads_and_streams<OutProjArgs>("out_proj_backward", tools::Axes{{"batch_size", 2}, {"seq_len", 512}},
                                   fresh_seed(700));
  threads_and_streams<OutProjArgs>("out_proj_backward", tools::Axes{{"batch_size", 1}, {"seq_len", 256}},
                                   fresh_seed(701));
}

TEST(CudaConcurrency, GqaRopeFromFourThreadsAndFourStreams) {
  ATTNBWD_SEED_TRACE();
  threads_and_streams<GqaRopeArgs>("gqa_rope_backward",
                                   tools::Axes{{"batch_size", 1},
                                               {"seq_len", 131},
                                               {"num_attention_heads", 8},
                                               {"num_key_value_heads", 2},
                                               {"head_dim", 128},
                                               {"hidden_size", 64}},
                                   fresh_seed(702));
}

TEST(CudaConcurrency, VisionMhaNormFromFourThreadsAndFourStreams) {
  ATTNBWD_SEED_TRACE();
  threads_and_streams<VisionMhaArgs>(
      "vision_mha_norm_backward",
      tools::Axes{{"batch_size", 2}, {"seq_len", 65}, {"num_heads", 2}, {"head_dim", 64}, {"embed_dim", 128}},
      fresh_seed(703));
}

TEST(CudaConcurrency, VisionVarlenRopeFromFourThreadsAndFourStreams) {
  ATTNBWD_SEED_TRACE();
  threads_and_streams<VisionVarlenArgs>("vision_varlen_rope_backward",
                                        tools::Axes{{"total_seq_len", 150},
                                                    {"num_sequences", 3},
                                                    {"num_heads", 2},
                                                    {"head_dim", 128},
                                                    {"hidden_size", 256}},
                                        fresh_seed(704));
}

// varlen through the dispatcher with cu_seqlens on the device and no host copy (the early path: each thread's
// Context copies cu_seqlens on its own copy stream into its own pinned buffer while the op's first part runs):
// four threads at once, each its own Kokkos::Cuda instance on its own stream and its own device buffers, three calls
// each; every thread's outputs have the bits of a sequential call.
TEST(CudaConcurrency, VisionVarlenEarlyPartFromFourThreads) {
  ATTNBWD_SEED_TRACE();
  using Args = VisionVarlenArgs;
  const tools::Axes axes{{"total_seq_len", 150}, {"num_sequences", 3}, {"num_heads", 2}, {"head_dim", 128},
                         {"hidden_size", 256}};
  const char* op = "vision_varlen_rope_backward";
  const tools::TensorSet in = tools::generate_inputs(op, axes, fresh_seed(705), tools::default_scalars(op));
  HostCase<Args> want(in, axes);
  {
    DeviceArgs<Kokkos::Cuda, Args> d(want.args);
    d.args.cu_seqlens_host = nullptr;
    Kokkos::fence();
    ASSERT_EQ(detail::run(Kokkos::Cuda(), d.args, Options{}), Backend::Cuda);
    Kokkos::fence();
    d.outputs_to(want.args);
  }
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  std::vector<std::unique_ptr<HostCase<Args>>> got;
  std::vector<std::unique_ptr<DeviceArgs<Kokkos::Cuda, Args>>> dev;
  std::vector<cudaStream_t> streams(kWays);
  std::vector<Kokkos::Cuda> execs;
  for (int t = 0; t < kWays; ++t) {
    got.push_back(std::make_unique<HostCase<Args>>(in, axes));
    dev.push_back(std::make_unique<DeviceArgs<Kokkos::Cuda, Args>>(got.back()->args));
    dev.back()->args.cu_seqlens_host = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&streams[static_cast<std::size_t>(t)], cudaStreamNonBlocking),
               "cudaStreamCreate");
    execs.emplace_back(streams[static_cast<std::size_t>(t)]);
  }
  Kokkos::fence();
  const std::vector<std::string> errors = on_threads(device, [&](int t) {
    const std::size_t i = static_cast<std::size_t>(t);
    for (int rep = 0; rep < 3; ++rep)
      if (detail::run(execs[i], dev[i]->args, Options{}) != Backend::Cuda) throw Error("not the fast path");
    if (cudaStreamSynchronize(streams[i]) != cudaSuccess) throw Error("cudaStreamSynchronize failed");
  });
  expect_threads_match(errors, got, dev, want);
  execs.clear();
  for (cudaStream_t st : streams) check_cuda(cudaStreamDestroy(st), "cudaStreamDestroy");
}

// A thread's Context gives its cuBLASLt handle back to the pool when the thread exits (it is not destroyed there:
// cuBLASLt's own thread-local state may be gone by then), and the next thread's Context takes it again; Contexts alive
// at once hold handles of their own. The handle values cannot show this (cuBLASLt 13 returns the same value from
// every cublasLtCreate of a process: this test's first run, H200, 2026-12-04), so the pool's counts are checked.
TEST(CudaConcurrency, ExitedThreadsGiveTheirCublasLtHandlesBack) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  (void)cuda::Context::current();  // this thread's Context holds a handle throughout
  const auto run_thread = [&] {
    bool got = false;
    std::thread t([&] {
      if (cudaSetDevice(device) == cudaSuccess) got = cuda::Context::current().lt() != nullptr;
    });
    t.join();
    return got;
  };
  ASSERT_TRUE(run_thread());
  // Now at least one handle is idle (the exited thread's), and threads one after another create no more.
  const cuda::LtPoolCounts after_one = cuda::lt_pool_counts(device);
  ASSERT_GE(after_one.idle, 1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(run_thread());
  const cuda::LtPoolCounts after_six = cuda::lt_pool_counts(device);
  EXPECT_EQ(after_six.created, after_one.created) << "threads one after another should reuse one handle";
  EXPECT_EQ(after_six.idle, after_one.idle);
  // Two threads alive at once hold two handles: the idle ones are taken first, the rest created; both come back.
  std::atomic<int> made{0};
  std::atomic<bool> done{false};
  std::atomic<int> null_handles{0};
  const auto hold = [&] {
    if (cudaSetDevice(device) != cudaSuccess || cuda::Context::current().lt() == nullptr) ++null_handles;
    ++made;
    while (!done.load()) std::this_thread::yield();
  };
  std::thread ta(hold), tb(hold);
  while (made.load() < 2) std::this_thread::yield();
  const cuda::LtPoolCounts during = cuda::lt_pool_counts(device);
  done = true;
  ta.join();
  tb.join();
  EXPECT_EQ(null_handles.load(), 0);
  const int taken = after_six.idle - during.idle, made_new = during.created - after_six.created;
  EXPECT_GE(taken, 0);
  EXPECT_GE(made_new, 0);
  EXPECT_EQ(taken + made_new, 2) << "two living Contexts should hold two handles (idle " << after_six.idle << " -> "
                                 << during.idle << ", created " << after_six.created << " -> " << during.created << ")";
  const cuda::LtPoolCounts after = cuda::lt_pool_counts(device);
  EXPECT_EQ(after.created, during.created);
  EXPECT_EQ(after.idle, during.idle + 2) << "both exited threads should give their handles back";
}

// ATTNBWD_CUDA_STREAMS (read by the ops' StageTimer): one sends the side-stream work of gqa, mha and varlen to the
// caller's stream; two and auto (and unset) keep the side stream; another value is an Error naming the variable.
// (The ops' bit tests under one, e.g. CudaVisionVarlenRope.OneStreamGivesTheTwoStreamsBits, cannot tell whether the
// switch took effect; this can.) No CUDA call is made: the timer is off, the streams are only compared.
TEST(CudaStreams, StreamsSwitchPutsTheSideWorkOnTheCallersStream) {
  const ScopedEnv stages("ATTNBWD_CUDA_STAGES", "0");
  cudaStream_t main_stream = nullptr, side = reinterpret_cast<cudaStream_t>(static_cast<std::uintptr_t>(0x40));
  {
    const ScopedEnv env("ATTNBWD_CUDA_STREAMS", "one");
    const cuda::StageTimer t(main_stream);
    EXPECT_TRUE(t.single_stream());
    EXPECT_EQ(t.side_or_main(side), main_stream);
  }
  for (const char* v : {"two", "auto"}) {
    const ScopedEnv env("ATTNBWD_CUDA_STREAMS", v);
    const cuda::StageTimer t(main_stream);
    EXPECT_FALSE(t.single_stream()) << v;
    EXPECT_EQ(t.side_or_main(side), side) << v;
  }
  {
    const ScopedEnv env("ATTNBWD_CUDA_STREAMS", "1");
    try {
      const cuda::StageTimer t(main_stream);
      ADD_FAILURE() << "ATTNBWD_CUDA_STREAMS=1 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ATTNBWD_CUDA_STREAMS"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace attnbwd::test

#endif
