// ATTNBWD_CUDA_STAGES=1: a diagnostic stage split for the fast path's ops (backends/cuda/README.md "Switches";
// perf/NOTES.md has the splits measured with it). With it on, an op runs its side-stream work on the
// caller's stream (no overlap, so the stage times add up to the serialised time), records an event
// after each stage, and at the end of the call synchronises and prints one line of per-stage
// milliseconds to stderr. Off by default, never used by tests, and off while the stream is being
// captured into a CUDA graph (ATTNBWD_CUDA_GRAPHS=1). ATTNBWD_CUDA_STREAMS=one (A/B timing) moves the
// side-stream work onto the caller's stream without the timing (the graph keys of the ops that capture
// include it). Two getenv per call.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "context.hpp"

namespace attnbwd::cuda {

class StageTimer {
 public:
  explicit StageTimer(cudaStream_t stream);
  ~StageTimer();
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

  bool on() const { return on_; }
  // One stream: the timer on, or ATTNBWD_CUDA_STREAMS=one (for A/B timing: the side-stream work of gqa, mha
  // and varlen in program order on the caller's stream instead of beside the main stream's; the same bits).
  bool single_stream() const { return single_; }
  // The stream for work that would otherwise go to `side`: `side`, or the caller's with one stream.
  cudaStream_t side_or_main(cudaStream_t side) const { return single_ ? stream_ : side; }
  // ctx.fork / ctx.join on the caller's stream; nothing with one stream (no side-stream work then).
  void fork(Context& ctx) const {
    if (!single_) ctx.fork(stream_);
  }
  void join(Context& ctx) const {
    if (!single_) ctx.join(stream_);
  }
  // ctx.mark_side / ctx.wait_side_mark (the caller's stream waits for the side stream's work up to the mark).
  void mark_side(Context& ctx) const {
    if (!single_) ctx.mark_side();
  }
  void wait_side_mark(Context& ctx) const {
    if (!single_) ctx.wait_side_mark(stream_);
  }
  // Ends the stage `name` (a string literal) at this point of the caller's stream.
  void mark(const char* name);
  // One stderr line: "`what` stages (ms): name ms ... | total ms". Synchronises.
  void report(const std::string& what);

 private:
  cudaStream_t stream_;
  bool on_ = false;
  bool single_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> names_;
};

}  // namespace attnbwd::cuda
