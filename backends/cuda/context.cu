#include "context.hpp"

#include <unistd.h>  // environ

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "attnbwd/error.hpp"
#include "check.hpp"
#include "switches.hpp"

namespace attnbwd::cuda {

namespace {
// A kernel of this target that does nothing: whether its attributes can be read tells whether the fat binary (every
// file of the target is built for the same ATTNBWD_CUDA_ARCHITECTURES) has an image for the current device.
__global__ void code_probe() {}

bool image_for_current_device() {
  cudaFuncAttributes attr{};
  const cudaError_t e = cudaFuncGetAttributes(&attr, code_probe);
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();  // not a sticky error: clear it
  if (e == cudaErrorInvalidDeviceFunction || e == cudaErrorNoKernelImageForDevice) return false;
  ATTNBWD_CUDA_CHECK(e);  // anything else is a failure of the runtime
  return false;
}

// cuBLASLt handles outlive the Contexts that used them. A Context lives in a thread_local map and is destroyed at its
// thread's exit; cuBLASLt keeps thread-local state of its own, created lazily inside cublasLtCreate (after our map,
// so destroyed before it), and destroying a handle after that state is gone is a known class of rare crashes at
// thread exit (other projects' fix: do not destroy vendor handles there). So a Context takes a handle from this
// per-device pool and gives it back when it dies; a later thread's Context reuses it (a handle may move between
// threads, one user at a time). The pool is never freed, so nothing is destroyed at process exit either.
// (cuBLASLt 13 gives the same handle value from every cublasLtCreate of a process: measured on an H200, session 30
// call 1. So the pool counts the handles it created; the values cannot tell them apart.)
struct LtPool {
  std::mutex m;
  std::map<int, std::vector<cublasLtHandle_t>> idle;
  std::map<int, int> created;
};
LtPool& lt_pool() {
  static auto* pool = new LtPool;
  return *pool;
}
cublasLtHandle_t take_lt(int device) {
  LtPool& pool = lt_pool();
  {
    const std::lock_guard<std::mutex> lock(pool.m);
    auto& idle = pool.idle[device];
    if (!idle.empty()) {
      const cublasLtHandle_t h = idle.back();
      idle.pop_back();
      return h;
    }
  }
  cublasLtHandle_t h = nullptr;
  ATTNBWD_CUBLAS_CHECK(cublasLtCreate(&h));
  const std::lock_guard<std::mutex> lock(pool.m);
  ++pool.created[device];
  return h;
}
void give_back_lt(int device, cublasLtHandle_t h) noexcept {
  try {
    LtPool& pool = lt_pool();
    const std::lock_guard<std::mutex> lock(pool.m);
    pool.idle[device].push_back(h);
  } catch (...) {  // out of memory at thread exit: the handle is leaked, which is what the pool does anyway
  }
}
// CUDA graph captures against Context set-up and teardown, process-wide. Measured on an H200 (driver 580.159.04,
// thirtieth session): with four threads each calling ops under ATTNBWD_CUDA_GRAPHS=auto, one thread's capture
// (cudaStreamCaptureModeThreadLocal) crashed the driver inside cudaEventRecord, or the exiting thread's Context
// destructor crashed inside cudaDeviceSynchronize, in 6 of 6 processes of 20 test repetitions; with graphs off none
// crashed in 480. So a capture (begin to instantiate), the dropping of graphs, and a Context's construction and
// destruction (allocations, frees and their synchronisations) never overlap across this process's threads; each is
// rare (a capture once per key and Context), so serialising them costs nothing in steady state. The destructor also
// waits only for this Context's own work, not the whole device.
std::recursive_mutex& capture_gate() {
  static auto* m = new std::recursive_mutex;
  return *m;
}
}  // namespace

LtPoolCounts lt_pool_counts(int device) {
  LtPool& pool = lt_pool();
  const std::lock_guard<std::mutex> lock(pool.m);
  LtPoolCounts c;
  c.created = pool.created[device];
  c.idle = static_cast<int>(pool.idle[device].size());
  return c;
}

Context& Context::current() {
  int device = 0;
  ATTNBWD_CUDA_CHECK(cudaGetDevice(&device));
  thread_local std::map<int, std::unique_ptr<Context>> contexts;
  auto& slot = contexts[device];
  if (!slot) slot.reset(new Context(device));
  return *slot;
}

Context::Context(int device) : device_(device) {
  const std::lock_guard<std::recursive_mutex> gate(capture_gate());
  cudaDeviceProp p{};
  ATTNBWD_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  cc_ = 10 * p.major + p.minor;
  sms_ = p.multiProcessorCount;
  if (cc_ != 90 && cc_ != 100)
    no_code_ = "no sm_90a/sm_100a code for compute capability " + std::to_string(cc_);
  else if (!image_for_current_device())  // Context::current() made the device current
    no_code_ = "this build has no code for compute capability " + std::to_string(cc_) +
               " (ATTNBWD_CUDA_ARCHITECTURES does not name sm_" + std::to_string(cc_) + "a)";
  lt_ = take_lt(device);
  ATTNBWD_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  ATTNBWD_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
  ATTNBWD_CUDA_CHECK(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming));
  ATTNBWD_CUDA_CHECK(cudaEventCreateWithFlags(&mark_, cudaEventDisableTiming));
  ATTNBWD_CUDA_CHECK(cudaEventCreateWithFlags(&handoff_, cudaEventDisableTiming));
  // Zeroed once: cuBLASLt 13's split-K reduction kernel (splitKreduce_kernel) reads workspace bytes
  // that its partial-product kernel did not write (compute-sanitizer initcheck, H200, varlen workload 8,
  // with and without the vendor kernels instrumented); the results do not depend on them, but their
  // contents are then defined and the same on every run. Unlike the scratch buffers (zeroed only with
  // ATTNBWD_CUDA_SANITIZE_INIT=1, as they may be reallocated per call) this costs once per Context.
  for (auto& ws : lt_ws_) {  // stream-ordered, so that the destructor frees them without a device synchronisation
    ATTNBWD_CUDA_CHECK(cudaMallocAsync(&ws, kLtWorkspaceBytes, side_));
    ATTNBWD_CUDA_CHECK(cudaMemsetAsync(ws, 0, kLtWorkspaceBytes, side_));
  }
  ATTNBWD_CUDA_CHECK(cudaStreamSynchronize(side_));  // done before any stream of the caller's uses them
}

Context::~Context() {
  // Destructors must not throw: errors here (e.g. at process exit after the driver shut down) are
  // ignored on purpose. This Context's work is over once its last op's handoff_ (recorded on the caller's stream
  // after everything the op queued, the side stream's work joined) and its side stream are (the capture stream only
  // records, it never runs work); every allocation is stream-ordered, so freed on the side stream after its work,
  // which is then synchronised once.
  const std::lock_guard<std::recursive_mutex> gate(capture_gate());
  if (claimed_) cudaEventSynchronize(handoff_);
  for (auto* p : scratch_)
    if (p) cudaFreeAsync(p, side_);
  for (auto* p : lt_ws_)
    if (p) cudaFreeAsync(p, side_);
  if (counters_) cudaFreeAsync(counters_, side_);
  if (side_) cudaStreamSynchronize(side_);
  for (auto& g : graphs_)
    if (g.second.exec) cudaGraphExecDestroy(g.second.exec);
  if (handoff_) cudaEventDestroy(handoff_);
  if (fork_) cudaEventDestroy(fork_);
  if (join_) cudaEventDestroy(join_);
  if (mark_) cudaEventDestroy(mark_);
  if (side_) cudaStreamDestroy(side_);
  if (capture_) cudaStreamDestroy(capture_);
  if (copy_) {
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }
  if (copy_after_) cudaEventDestroy(copy_after_);
  if (copy_done_) cudaEventDestroy(copy_done_);
  if (pinned_) cudaFreeHost(pinned_);
  if (lt_) give_back_lt(device_, lt_);  // not cublasLtDestroy: see LtPool
}

void Context::fork(cudaStream_t main) {
  ATTNBWD_CUDA_CHECK(cudaEventRecord(fork_, main));
  ATTNBWD_CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
}

void Context::join(cudaStream_t main) {
  ATTNBWD_CUDA_CHECK(cudaEventRecord(join_, side_));
  ATTNBWD_CUDA_CHECK(cudaStreamWaitEvent(main, join_, 0));
}

void Context::host_copy_after(cudaStream_t after) {
  if (!copy_) {
    ATTNBWD_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    ATTNBWD_CUDA_CHECK(cudaEventCreateWithFlags(&copy_after_, cudaEventDisableTiming));
    ATTNBWD_CUDA_CHECK(cudaEventCreateWithFlags(&copy_done_, cudaEventDisableTiming));
  }
  ATTNBWD_CUDA_CHECK(cudaEventRecord(copy_after_, after));
}

void Context::begin_host_copy(const void* src, std::size_t bytes) {
  if (!copy_) throw Error("cuda backend: begin_host_copy without host_copy_after");
  if (bytes > pinned_bytes_) {
    // The copy stream holds no copy in flight here (finish_host_copy waited for the last one).
    if (pinned_) ATTNBWD_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr, pinned_bytes_ = 0;
    const std::size_t grown = std::max<std::size_t>(bytes, 4096);
    ATTNBWD_CUDA_CHECK(cudaMallocHost(&pinned_, grown));
    pinned_bytes_ = grown;
  }
  ATTNBWD_CUDA_CHECK(cudaStreamWaitEvent(copy_, copy_after_, 0));
  ATTNBWD_CUDA_CHECK(cudaMemcpyAsync(pinned_, src, bytes, cudaMemcpyDeviceToHost, copy_));
  ATTNBWD_CUDA_CHECK(cudaEventRecord(copy_done_, copy_));
}

void Context::finish_host_copy(void* dst, std::size_t bytes) {
  if (!copy_ || bytes > pinned_bytes_) throw Error("cuda backend: finish_host_copy without its begin_host_copy");
  ATTNBWD_CUDA_CHECK(cudaEventSynchronize(copy_done_));
  std::memcpy(dst, pinned_, bytes);
}

void Context::mark_side() { ATTNBWD_CUDA_CHECK(cudaEventRecord(mark_, side_)); }

void Context::wait_side_mark(cudaStream_t main) { ATTNBWD_CUDA_CHECK(cudaStreamWaitEvent(main, mark_, 0)); }

void Context::claim(cudaStream_t stream, bool allowed) {
  // ATTNBWD_CUDA_LT_TUNE=auto|off|on|verbose|main (backends/cuda/README.md "Switches"): auto times the choices
  // unless the call is deterministic; main (diagnostic) as auto for the caller's-stream GEMMs only.
  // ATTNBWD_CUDA_LT_TUNE_GAIN=PCT (diagnostic, 0-50): the gain a timed candidate needs, 2 % by default.
  const int sw = env_switch("ATTNBWD_CUDA_LT_TUNE", {"auto", "off", "on", "verbose", "main"});
  LtTune t;
  t.mode = sw == 1 || ((sw == 0 || sw == 4) && !allowed) ? 0 : sw == 3 ? 2 : 1;
  t.main_only = sw == 4;
  if (const char* v = std::getenv("ATTNBWD_CUDA_LT_TUNE_GAIN"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double pct = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(pct >= 0.0 && pct <= 50.0))
      throw Error("ATTNBWD_CUDA_LT_TUNE_GAIN", std::string("expected a percentage in 0..50, got \"") + v + "\"");
    t.gain = static_cast<float>(pct / 100.0);
  }
  lt_tune_ = t;
  plain_gemm_ = env_switch("ATTNBWD_CUDA_SANITIZE_GEMM", {"cublaslt", "plain"}) == 1;  // a bad value: before any output
  // handoff_ was recorded at the end of the previous op (its stream may be gone by now; the event
  // keeps what it captured).
  if (claimed_ && stream != last_stream_) ATTNBWD_CUDA_CHECK(cudaStreamWaitEvent(stream, handoff_, 0));
}

void Context::release(cudaStream_t stream) {
  ATTNBWD_CUDA_CHECK(cudaEventRecord(handoff_, stream));
  last_stream_ = stream;
  claimed_ = true;
}

unsigned* Context::counters(std::size_t n, cudaStream_t stream) {
  if (n > counters_n_) {
    if (capturing_) throw Error("cuda backend: counters would grow inside a CUDA graph capture");
    if (counters_) ATTNBWD_CUDA_CHECK(cudaFreeAsync(counters_, stream));
    counters_ = nullptr;
    const std::size_t grown = std::max<std::size_t>(n, 4096);
    void* p = nullptr;
    ATTNBWD_CUDA_CHECK(cudaMallocAsync(&p, grown * sizeof(unsigned), stream));
    ATTNBWD_CUDA_CHECK(cudaMemsetAsync(p, 0, grown * sizeof(unsigned), stream));
    counters_ = static_cast<unsigned*>(p);
    counters_n_ = grown;
    ++generation_;
  }
  return counters_;
}

void* Context::scratch(int slot, std::size_t bytes, cudaStream_t stream, bool poison) {
  if (bytes > scratch_bytes_[slot]) {
    if (capturing_) throw Error("cuda backend: scratch would grow inside a CUDA graph capture");
    if (scratch_[slot]) ATTNBWD_CUDA_CHECK(cudaFreeAsync(scratch_[slot], stream));
    scratch_[slot] = nullptr;
    ATTNBWD_CUDA_CHECK(cudaMallocAsync(&scratch_[slot], bytes, stream));
    static const bool zero_for_initcheck = env_switch("ATTNBWD_CUDA_SANITIZE_INIT", {"0", "1"}) == 1;
    if (zero_for_initcheck) ATTNBWD_CUDA_CHECK(cudaMemsetAsync(scratch_[slot], 0, bytes, stream));
    scratch_bytes_[slot] = bytes;
    ++generation_;
  }
  // ATTNBWD_CUDA_SCRATCH=auto|poison (diagnostic, for tests): poison sets the bytes asked for to 0xff (NaN in fp32 and
  // fp16) on every call, so that work a kernel leaves undone shows in the outputs instead of last call's values.
  if (poison && env_switch("ATTNBWD_CUDA_SCRATCH", {"auto", "poison"}) == 1)
    ATTNBWD_CUDA_CHECK(cudaMemsetAsync(scratch_[slot], 0xff, bytes, stream));
  return scratch_[slot];
}

namespace {
// ATTNBWD_CUDA_GRAPHS=auto|0|1: 1 captures and replays (Context::enqueue), 0 runs every call directly, auto (the
// default) is 1 for the ops that gain (in_auto) except under the stage timer (ATTNBWD_CUDA_STAGES=1, whose per-call
// timing needs direct runs).
bool graphs_enabled(bool in_auto) {
  const int mode = env_switch("ATTNBWD_CUDA_GRAPHS", {"auto", "0", "1"});
  if (mode == 0) return in_auto && env_switch("ATTNBWD_CUDA_STAGES", {"0", "1"}) != 1;
  return mode == 2;
}

// FNV-1a over every ATTNBWD_* variable of the environment (name and value): a key never replays work enqueued under
// other variant switches, whichever of them the op's own key lists.
std::uint64_t attnbwd_env_hash() {
  std::uint64_t h = 1469598103934665603ull;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "ATTNBWD_", 8) != 0) continue;
    for (const char* c = *e; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // separator
  }
  return h;
}
}  // namespace

void Context::drop_graphs(cudaStream_t stream) {
  // Before an executable graph is destroyed every launch of it must be over: `stream` already waits for this
  // context's previous op (claim), so synchronising it is enough.
  const std::lock_guard<std::recursive_mutex> gate(capture_gate());
  ATTNBWD_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (auto& entry : graphs_) {
    Graph& g = entry.second;
    if (!g.exec) continue;
    cudaGraphExecDestroy(g.exec);
    if (g.launches <= 1) ++wasted_;  // captured, never replayed
    g = Graph{generation_};          // a first sight again: captured anew at its next call
  }
  execs_ = 0;
}

void Context::reset_graphs() {
  const std::lock_guard<std::recursive_mutex> gate(capture_gate());
  ATTNBWD_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& entry : graphs_)
    if (entry.second.exec) cudaGraphExecDestroy(entry.second.exec);
  graphs_.clear();
  execs_ = wasted_ = 0;
  capture_off_ = false;
  failure_.clear();
}

void Context::enqueue(const std::function<GraphKey()>& make_key, cudaStream_t stream,
                      const std::function<void(cudaStream_t)>& work, bool in_auto) {
  if (!graphs_enabled(in_auto)) {
    work(stream);
    return;
  }
  GraphKey key = make_key();
  key.push_back(attnbwd_env_hash());
  key.push_back(static_cast<std::uint64_t>(lt_tune_.mode));  // a graph holds the GEMM algorithms chosen under it
  auto it = graphs_.find(key);
  if (it == graphs_.end() || it->second.generation != generation_) {
    // First sight of the key (or its addresses went stale after a scratch growth): run directly, remember it.
    if (it != graphs_.end() && it->second.exec) {
      drop_graphs(stream);  // stale: every graph holds the old scratch addresses (rare)
    } else if (it == graphs_.end() && graphs_.size() >= kMaxKeys) {
      // Bounded without synchronising: forget the keys seen once (a caller whose buffers move every call only
      // ever adds those, and never pays a capture or a stream synchronisation).
      for (auto e = graphs_.begin(); e != graphs_.end();) e = e->second.exec ? std::next(e) : graphs_.erase(e);
    }
    work(stream);
    graphs_[key] = Graph{generation_};
    return;
  }
  Graph& g = it->second;
  if (g.direct || capture_off_) {
    work(stream);
    return;
  }
  if (!g.exec) {
    if (execs_ >= kMaxGraphs) {
      drop_graphs(stream);
      // More than kMaxGraphs keys recurring in a cycle longer than the cache: captures that are never replayed.
      // Stop capturing in this context (every call direct) rather than pay a capture per call.
      if (wasted_ >= kMaxGraphs) capture_off_ = true;
      if (capture_off_) {
        work(stream);
        return;
      }
    }
    // Second sight: capture. The scratch already fits (same key, no reallocation since), so the
    // capture records kernels, copies and cuBLASLt calls only. Captured on a stream of our own
    // (nothing runs during a capture), so the caller's stream may be the legacy default stream,
    // which cannot be captured; the graph is launched on the caller's. Where capturing fails, the
    // key runs directly from then on.
    // (capture_gate: no other thread of this process captures, or sets up or tears down a Context, meanwhile.)
    std::unique_lock<std::recursive_mutex> gate(capture_gate());
    if (!capture_) ATTNBWD_CUDA_CHECK(cudaStreamCreateWithFlags(&capture_, cudaStreamNonBlocking));
    ATTNBWD_CUDA_CHECK(cudaStreamBeginCapture(capture_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    bool ok = true;
    try {
      work(capture_);
    } catch (const std::exception& e) {
      ok = false;
      fail(std::string("capture: ") + e.what());
    }
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(capture_, &graph);
    const cudaError_t inst =
        ok && end == cudaSuccess && graph != nullptr ? cudaGraphInstantiate(&g.exec, graph, 0) : cudaSuccess;
    if (inst != cudaSuccess) g.exec = nullptr;
    if (graph) cudaGraphDestroy(graph);
    if (ok && end != cudaSuccess) fail(std::string("capture: its end failed: ") + cudaGetErrorString(end));
    if (ok && inst != cudaSuccess) fail(std::string("capture: instantiation failed: ") + cudaGetErrorString(inst));
    gate.unlock();
    if (!ok || end != cudaSuccess || g.exec == nullptr) {
      cudaGetLastError();  // clear a capture error
      g.exec = nullptr;
      g.direct = true;
      work(stream);
      return;
    }
    ++execs_;
  }
  ATTNBWD_CUDA_CHECK(cudaGraphLaunch(g.exec, stream));
  ++g.launches;
}

}  // namespace attnbwd::cuda
