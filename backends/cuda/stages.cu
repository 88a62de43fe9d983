#include "stages.hpp"

#include <cstdio>

#include "check.hpp"
#include "switches.hpp"

namespace attnbwd::cuda {

StageTimer::StageTimer(cudaStream_t stream) : stream_(stream) {
  single_ = env_switch("ATTNBWD_CUDA_STREAMS", {"auto", "two", "one"}) == 2;
  if (env_switch("ATTNBWD_CUDA_STAGES", {"0", "1"}) != 1) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  ATTNBWD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  on_ = capture == cudaStreamCaptureStatusNone;
  single_ = single_ || on_;
  mark("start");
}

StageTimer::~StageTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

void StageTimer::mark(const char* name) {
  if (!on_) return;
  cudaEvent_t e;
  ATTNBWD_CUDA_CHECK(cudaEventCreate(&e));
  events_.push_back(e);
  names_.push_back(name);
  ATTNBWD_CUDA_CHECK(cudaEventRecord(e, stream_));
}

void StageTimer::report(const std::string& what) {
  if (!on_ || events_.empty()) return;
  ATTNBWD_CUDA_CHECK(cudaEventSynchronize(events_.back()));
  std::string line = what + " stages (ms):";
  float total = 0.0f;
  for (std::size_t i = 1; i < events_.size(); ++i) {
    float ms = 0.0f;
    ATTNBWD_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
    total += ms;
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.4f", names_[i], ms);
    line += buf;
  }
  std::fprintf(stderr, "%s | total %.4f\n", line.c_str(), total);
}

}  // namespace attnbwd::cuda
