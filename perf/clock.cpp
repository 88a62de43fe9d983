#include "clock.hpp"

#include "call_span.hpp"

#include <Kokkos_Macros.hpp>  // KOKKOS_ENABLE_CUDA

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <vector>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
// CMake defines ATTNBWD_PERF_HAVE_CUPTI where it found the toolkit's CUPTI; the record layouts read
// below are CUPTI 13's (CUDA 13), so an older CUPTI builds the events clock only.
#ifdef ATTNBWD_PERF_HAVE_CUPTI
#include <cupti.h>
#if CUPTI_API_VERSION >= 130000
#define ATTNBWD_PERF_CUPTI 1
#endif
#endif
#endif

namespace attnbwd::perf {
namespace {

class HostClock final : public IterationClock {
 public:
  explicit HostClock(std::function<void()> fence)
      : fence_(std::move(fence)), buffer_(2 * host_cache_bytes()) {}
  void flush() override {
    fence_();
    std::memset(buffer_.data(), ++fill_, buffer_.size());  // a new value each time: no shortcut
  }
  void start() override {
    fence_();
    t0_ = std::chrono::steady_clock::now();
  }
  double stop() override {
    fence_();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  std::size_t flush_bytes() const override { return buffer_.size(); }
  const char* method() const override { return "wall-clock"; }

 private:
  std::function<void()> fence_;
  std::vector<unsigned char> buffer_;
  unsigned char fill_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

std::size_t read_cache_size(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text.empty()) return 0;
  std::size_t value = std::strtoull(text.c_str(), nullptr, 10);
  const char unit = text.back();
  if (unit == 'K') value <<= 10;
  if (unit == 'M') value <<= 20;
  return value;
}

#ifdef KOKKOS_ENABLE_CUDA
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

class CudaClock final : public IterationClock {
 public:
  explicit CudaClock(void* stream) : stream_(static_cast<cudaStream_t>(stream)) {
    bytes_ = 2 * std::max<std::size_t>(query_gpu().l2_bytes, 1);
    check(cudaMalloc(&buffer_, bytes_), "cudaMalloc (L2 flush buffer)");
    check(cudaEventCreate(&start_), "cudaEventCreate");
    check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaClock() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
    cudaFree(buffer_);
  }
  // Zero-filled as the harness does. Queued on the call's stream, so the GPU is still busy with it
  // while the host launches the call: no launch gap opens before the start event.
  void flush() override { check(cudaMemsetAsync(buffer_, 0, bytes_, stream_), "cudaMemsetAsync"); }
  void start() override { check(cudaEventRecord(start_, stream_), "cudaEventRecord"); }
  double stop() override {
    check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms * 1e-3;
  }
  std::size_t flush_bytes() const override { return bytes_; }
  const char* method() const override { return "cuda-events"; }

 private:
  cudaStream_t stream_;
  void* buffer_ = nullptr;
  std::size_t bytes_ = 0;
  cudaEvent_t start_{}, stop_{};
};

#ifdef ATTNBWD_PERF_CUPTI
void check_cupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  throw std::runtime_error(std::string(what) + ": " + (text ? text : "CUPTI error"));
}

// The process's CUPTI activity stream (CUPTI allows one subscriber of activity buffers): started on
// first use and left running; records are collected under a lock, since CUPTI may hand buffers back
// from its own thread.
class Activities {
 public:
  static Activities& instance() {
    // Never destroyed: CUPTI may still hand back buffers while the process exits.
    static Activities* a = new Activities;
    return *a;
  }
  // Every record completed so far, the buffers flushed first (all queued GPU work must be finished).
  std::vector<Activity> take() {
    check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    std::lock_guard<std::mutex> lock(mutex_);
    if (dropped_ > 0) {
      dropped_ = 0;
      records_.clear();
      throw std::runtime_error("CUPTI dropped activity records (buffers too small)");
    }
    std::vector<Activity> out;
    out.swap(records_);
    return out;
  }

 private:
  static constexpr std::size_t kBufferBytes = std::size_t(8) << 20;

  Activities() {
    check_cupti(cuptiActivityRegisterCallbacks(&requested, &completed), "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMCPY2})
      check_cupti(cuptiActivityEnable(kind), "cuptiActivityEnable");
  }

  static void CUPTIAPI requested(std::uint8_t** buffer, std::size_t* size, std::size_t* max_records) {
    // malloc's alignment (16) covers CUPTI's ACTIVITY_RECORD_ALIGNMENT (8).
    *buffer = static_cast<std::uint8_t*>(std::malloc(kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI completed(CUcontext context, std::uint32_t stream_id, std::uint8_t* buffer,
                                 std::size_t /*size*/, std::size_t valid) {
    Activities& self = instance();
    std::vector<Activity> got;
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
      Activity a;
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          a.start = k->start, a.end = k->end, a.name = k->name, a.stream = k->streamId;
          a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
          a.cluster[0] = static_cast<std::int32_t>(k->clusterX), a.cluster[1] = static_cast<std::int32_t>(k->clusterY),
          a.cluster[2] = static_cast<std::int32_t>(k->clusterZ);
          a.smem = k->staticSharedMemory + k->dynamicSharedMemory;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          a.start = m->start, a.end = m->end, a.bytes = m->bytes, a.memset = true, a.stream = m->streamId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          a.start = m->start, a.end = m->end, a.bytes = m->bytes, a.stream = m->streamId;
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY2: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record);
          a.start = m->start, a.end = m->end, a.bytes = m->bytes;
          break;
        }
        default:
          continue;
      }
      got.push_back(a);
    }
    std::size_t dropped = 0;
    cuptiActivityGetNumDroppedRecords(context, stream_id, &dropped);
    std::free(buffer);
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.records_.insert(self.records_.end(), got.begin(), got.end());
    self.dropped_ += dropped;
  }

  std::mutex mutex_;
  std::vector<Activity> records_;
  std::size_t dropped_ = 0;
};

// The spec's measure (§7): the span from the earliest GPU start to the latest GPU end among the
// kernels, memsets and memcpys of the call (call_span_seconds: the call's activities are those that
// start after the flush's memset ends). The CUDA events are recorded around the call as well, so each
// call's events time is reported beside its span.
class CuptiClock final : public IterationClock {
 public:
  explicit CuptiClock(void* stream) : events_(stream), activities_(Activities::instance()) {
    // ATTNBWD_PERF_TIMELINE=<file>: every timed call's activities appended to the file (a diagnostic: where the
    // call's time goes on each stream, with the overlap ncu's serialised launches cannot show;
    // perf/scripts/timeline.py reads it).
    if (const char* path = std::getenv("ATTNBWD_PERF_TIMELINE"); path && *path) {
      timeline_.open(path, std::ios::app);
      if (!timeline_) throw std::runtime_error(std::string("ATTNBWD_PERF_TIMELINE: cannot open ") + path);
    }
  }
  void flush() override {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    activities_.take();  // the warm-ups' and earlier calls' records
    events_.flush();
  }
  void start() override { events_.start(); }
  double stop() override {
    events_seconds_ = events_.stop();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const std::vector<Activity> acts = activities_.take();
    const double span = call_span_seconds(acts, events_.flush_bytes());
    if (timeline_.is_open()) write_timeline(call_activities(acts, events_.flush_bytes()), span);
    // The events bracket every activity of the call on the GPU's timeline (the side streams join before the stop
    // event), so a longer span means records of other work were taken for the call's.
    if (span > events_seconds_ + 1e-6)
      throw std::runtime_error("CUPTI clock: the span (" + std::to_string(span * 1e6) +
                               " us) is longer than the CUDA events around the call (" +
                               std::to_string(events_seconds_ * 1e6) + " us)");
    return span;
  }
  std::size_t flush_bytes() const override { return events_.flush_bytes(); }
  const char* method() const override { return "cupti-span"; }
  double last_events_seconds() const override { return events_seconds_; }

 private:
  // One call: "call <n> span_us <span> events_us <events>", then per activity "<start> <end> (µs from the call's
  // first start) <stream> <kind> <name> <grid x,y,z> <cluster x,y,z> <shared bytes per CTA>".
  void write_timeline(const std::vector<Activity>& call, double span) {
    if (call.empty()) return;
    const std::uint64_t t0 = call.front().start;
    timeline_ << "call " << calls_++ << " span_us " << span * 1e6 << " events_us " << events_seconds_ * 1e6 << '\n';
    for (const Activity& a : call)
      timeline_ << (a.start - t0) * 1e-3 << ' ' << (a.end - t0) * 1e-3 << ' ' << a.stream << ' '
                << (a.memset ? "memset" : a.name ? "kernel" : "memcpy") << ' ' << (a.name ? a.name : "-") << ' '
                << a.grid[0] << ',' << a.grid[1] << ',' << a.grid[2] << ' ' << a.cluster[0] << ',' << a.cluster[1]
                << ',' << a.cluster[2] << ' ' << a.smem << '\n';
    timeline_.flush();
  }

  CudaClock events_;
  Activities& activities_;
  double events_seconds_ = -1;
  std::ofstream timeline_;
  int calls_ = 0;
};
#endif  // ATTNBWD_PERF_CUPTI
#endif

}  // namespace

std::unique_ptr<IterationClock> make_host_clock(std::function<void()> fence) {
  return std::make_unique<HostClock>(std::move(fence));
}

std::unique_ptr<IterationClock> make_cuda_clock([[maybe_unused]] void* stream,
                                                [[maybe_unused]] const std::string& method) {
#ifdef KOKKOS_ENABLE_CUDA
  if (method == "events") return std::make_unique<CudaClock>(stream);
  if (method != "cupti") throw std::runtime_error("unknown CUDA clock \"" + method + "\" (cupti, events)");
#ifdef ATTNBWD_PERF_CUPTI
  return std::make_unique<CuptiClock>(stream);
#else
  throw std::runtime_error("the CUPTI clock is not built in (CUPTI 13 or newer not found at configure time)");
#endif
#else
  throw std::runtime_error("CUDA timing requested in a build without CUDA");
#endif
}

bool cupti_clock_built() {
#ifdef ATTNBWD_PERF_CUPTI
  return true;
#else
  return false;
#endif
}

GpuInfo query_gpu() {
  GpuInfo info;
#ifdef KOKKOS_ENABLE_CUDA
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess)
    return info;
  info.present = true;
  info.name = prop.name;
  info.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
  info.sm_count = prop.multiProcessorCount;
#endif
  return info;
}

std::size_t host_cache_bytes() {
  std::size_t largest = 0;
  for (int i = 0; i < 8; ++i)
    largest = std::max(largest, read_cache_size("/sys/devices/system/cpu/cpu0/cache/index" +
                                                std::to_string(i) + "/size"));
  return largest > 0 ? largest : std::size_t(32) << 20;
}

}  // namespace attnbwd::perf
