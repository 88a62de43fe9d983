#include "clock.hpp"

#include <Kokkos_Macros.hpp>  // KOKKOS_ENABLE_CUDA

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

#ifdef KOKKOS_ENABLE_CUDA
#include <cuda_runtime.h>
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
#endif

}  // namespace

std::unique_ptr<IterationClock> make_host_clock(std::function<void()> fence) {
  return std::make_unique<HostClock>(std::move(fence));
}

std::unique_ptr<IterationClock> make_cuda_clock([[maybe_unused]] void* stream) {
#ifdef KOKKOS_ENABLE_CUDA
  return std::make_unique<CudaClock>(stream);
#else
  throw std::runtime_error("CUDA timing requested in a build without CUDA");
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
