// How one benchmark iteration is prepared and timed (spec §7): the cache is flushed before every
// call by writing a buffer of twice its size (not timed), then the call is timed alone.
//   device (Kokkos::Cuda): cudaMemsetAsync of 2 × L2 on the call's stream, then either
//     "cupti": the spec's own measure, the span from the earliest GPU start to the latest GPU end
//       of the kernels, memsets and memcpys the call issued (CUPTI activity records; the CUDA
//       events are recorded as well and reported beside it), or
//     "events": CUDA events recorded on the call's stream around it (includes the gap between
//       the start event and the first kernel, and between the last kernel and the stop event);
//   host: memset of 2 × the largest CPU cache and the wall clock between two fences.
// The CUDA half lives in clock.cpp behind KOKKOS_ENABLE_CUDA (nvcc compiles it in the CUDA build),
// so no other perf file needs the CUDA runtime headers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace attnbwd::perf {

class IterationClock {
 public:
  virtual ~IterationClock() = default;
  virtual void flush() = 0;      // evict the call's data from the caches; queued before start()
  virtual void start() = 0;
  virtual double stop() = 0;     // seconds since start(), once the call has finished
  virtual std::size_t flush_bytes() const = 0;
  virtual const char* method() const = 0;  // "cupti-span", "cuda-events" or "wall-clock"
  // The CUDA-event time of the call stop() just measured, where the clock keeps it beside its own
  // measure (the CUPTI clock); negative otherwise.
  virtual double last_events_seconds() const { return -1; }
};

// `fence` waits for the execution space's queued work.
std::unique_ptr<IterationClock> make_host_clock(std::function<void()> fence);
// `stream` is a cudaStream_t; `method` is "cupti" or "events". Throws std::runtime_error when CUDA
// (or, for "cupti", CUPTI 13 or newer) is not built in, or CUPTI cannot be started.
std::unique_ptr<IterationClock> make_cuda_clock(void* stream, const std::string& method);
// Whether this build has the CUPTI clock (the default CUDA clock when it has).
bool cupti_clock_built();

// The CUDA device in use (the current one, which Kokkos selected).
struct GpuInfo {
  bool present = false;
  std::string name;
  std::size_t l2_bytes = 0;
  int sm_count = 0;
};
GpuInfo query_gpu();  // present = false without CUDA

// The largest CPU cache level of cpu0 (sysfs), or 32 MiB when it cannot be read.
std::size_t host_cache_bytes();

}  // namespace attnbwd::perf
