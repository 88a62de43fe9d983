// What the CUDA fast path keeps across calls, per thread and device: the device's properties, a
// cuBLASLt handle, stream-ordered workspaces, a side stream with fork/join events for concurrent
// GEMMs, and cuBLASLt algorithm choices per GEMM shape. Results are never cached.
//
// One Context per (thread, device): calls from different threads never share one, so no locking.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>
#include <map>
#include <string>
#include <tuple>

namespace attnbwd::cuda {

// The per-device pool of cuBLASLt handles (context.cu): how many handles it created, and how many are idle (given
// back by Contexts that died). For tests.
struct LtPoolCounts {
  int created = 0;
  int idle = 0;
};
LtPoolCounts lt_pool_counts(int device);

class Context {
 public:
  // The calling thread's context for the current CUDA device.
  static Context& current();

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  int device() const { return device_; }
  int cc() const { return cc_; }  // compute capability as 10·major + minor (90 = Hopper)
  // Why the fast path cannot run on this device ("" when it can): its code is for sm_90 and sm_100 only (the
  // kernels and their dispatch), arch-specific ("a") code runs on exactly its capability (not on 9.x or 10.x
  // siblings such as 10.3), and this build must hold code for the device (ATTNBWD_CUDA_ARCHITECTURES may name one
  // of the two only): a probe kernel's attributes are read when the Context is made, so a device the fat binary has
  // no image for falls back to the portable path instead of failing at its first launch.
  const std::string& no_code() const { return no_code_; }
  int sm_count() const { return sms_; }
  cublasLtHandle_t lt() const { return lt_; }

  // Work slots: 0 runs on the caller's stream, 1 on the side stream. Each has its own workspace.
  static constexpr int kSlots = 2;
  cudaStream_t side_stream() const { return side_; }
  void fork(cudaStream_t main);  // the side stream waits for everything queued on `main` so far
  void join(cudaStream_t main);  // `main` waits for everything queued on the side stream
  // A partial join: mark_side() records what is queued on the side stream now; wait_side_mark(main) makes `main`
  // wait for that much only (work queued on the side stream after the mark keeps running beside `main`).
  void mark_side();
  void wait_side_mark(cudaStream_t main);

  // claim() at the start of every op on `stream`, release() at its end: when the previous op of this
  // context ran on another stream, `stream` first waits for it, so two ops of one thread on two
  // streams never use the scratch, counters or side stream at once (they serialise; distinct
  // threads have distinct contexts and run in parallel).
  // How this op's cuBLASLt GEMMs choose their algorithms (lt_gemm.cu), read from ATTNBWD_CUDA_LT_TUNE and
  // ATTNBWD_CUDA_LT_TUNE_GAIN by claim(), before the op queues any work (a malformed value is an Error there).
  // `allowed`: false for calls with Options::deterministic, which under auto take cuBLASLt's first heuristic
  // answer (the same algorithm in every process on the same GPU and cuBLASLt).
  struct LtTune {
    int mode = 0;            // 0: first heuristic answer; 1: timed choice (lt_gemm.cu); 2: timed and printed
    bool main_only = false;  // timed choices for the GEMMs on the caller's stream (slot 0) only
    float gain = 0.02f;      // the gain over the first answer a timed candidate needs
  };
  void claim(cudaStream_t stream, bool allowed = true);
  // A small device→host copy that does not wait for the op's own work: host_copy_after(after) marks what is queued on
  // `after` so far (the caller's work that may write the source); begin_host_copy then queues `bytes` from `src`
  // (device) into a pinned staging buffer on the context's copy stream, ordered after that mark only (not after what
  // was queued on `after` since); finish_host_copy waits for that copy only and moves the bytes to `dst` (host). For
  // varlen's cu_seqlens (vision_varlen_rope_backward.cu: the host validates it while the op's first part runs; the
  // part is queued between the mark and the copy, so that the copy, which the call's span counts, does not start
  // before the part's first kernel).
  void host_copy_after(cudaStream_t after);
  void begin_host_copy(const void* src, std::size_t bytes);
  void finish_host_copy(void* dst, std::size_t bytes);
  void release(cudaStream_t stream);
  const LtTune& lt_tune() const { return lt_tune_; }
  // ATTNBWD_CUDA_SANITIZE_GEMM=plain (compute-sanitizer runs only; lt_gemm.cu): every GEMM of the call through the plain
  // kernel instead of cuBLASLt. Read by claim(), before the op enqueues anything.
  bool plain_gemm() const { return plain_gemm_; }

  // `n` zeroed unsigned counters for kernels that leave them zero when they finish (split-K arrival
  // counts). Grown, and zeroed, on `stream` when needed.
  unsigned* counters(std::size_t n, cudaStream_t stream);

  // Enqueues `work(stream)`, the whole GPU work of one op call, either directly or as a CUDA graph:
  // with ATTNBWD_CUDA_GRAPHS=auto (the default) or 1 the work of a call whose `key` (op, shape, every
  // pointer, every scalar and option it depends on; enqueue adds every ATTNBWD_* variable) was seen
  // before is captured once and replayed, which saves the host-side launch cost of many small kernels
  // and cuBLASLt calls; 0 runs every call directly. The first call of a key runs directly (it sizes the
  // scratch); a scratch or counter reallocation since then invalidates every captured graph (they hold
  // the old addresses). Bounds: keys seen once are forgotten without a synchronisation when kMaxKeys
  // are held (a caller whose buffers move every call pays the key only); at most kMaxGraphs graphs,
  // dropped together (one stream synchronisation) when a new one is due; once kMaxGraphs graphs have
  // been dropped unreplayed, the context stops capturing. `work` must enqueue on `stream` (and the side
  // stream through fork/join) only, and must not call claim/release. `key()` is only called when graphs
  // are on (it is not free: every address of the call).
  using GraphKey = std::vector<std::uint64_t>;
  // `in_auto`: false for an op whose calls auto runs directly (graphs only with ATTNBWD_CUDA_GRAPHS=1).
  void enqueue(const std::function<GraphKey()>& key, cudaStream_t stream,
               const std::function<void(cudaStream_t)>& work, bool in_auto = true);

  // The graph cache's state (tests, diagnostics): keys held, executable graphs held, graphs dropped without a
  // replay, whether this context has stopped capturing, and the first failed capture's cause since reset_graphs
  // (empty while none failed; a failed capture's key runs directly, with the same bits, so only this shows it).
  struct GraphStats {
    std::size_t keys = 0, graphs = 0, wasted = 0;
    bool capture_off = false;
    std::string failure;
  };
  GraphStats graph_stats() const { return GraphStats{graphs_.size(), execs_, wasted_, capture_off_, failure_}; }
  // Synchronises the device, then forgets every key and graph and the stop (tests start from a clean cache).
  void reset_graphs();

  // Device scratch of at least `bytes` for `slot`, valid for work queued on `stream` (the slot's
  // stream) until the next call that grows it: growth is stream-ordered (cudaFreeAsync/MallocAsync).
  // With ATTNBWD_CUDA_SANITIZE_INIT=1 (for compute-sanitizer initcheck runs only) a new allocation is
  // zeroed: initcheck does not see the stores of cuBLASLt's sm_90 GEMM kernels, so our kernels that
  // read a GEMM result from scratch would otherwise be reported (cmake/probes/initcheck_cublaslt.cu
  // shows it on a bare cuBLASLt call; device-check.sh runs it). With ATTNBWD_CUDA_SCRATCH=poison (tests) the `bytes`
  // are set to 0xff on `stream` at every call (`poison` false: not this time — a later part of the same op call whose
  // first part wrote the scratch, vision_varlen_rope_backward.cu).
  void* scratch(int slot, std::size_t bytes, cudaStream_t stream, bool poison = true);

  // cuBLASLt workspace of the slot (fixed size, allocated once).
  void* lt_workspace(int slot) const { return lt_ws_[slot]; }
  static constexpr std::size_t kLtWorkspaceBytes = 32u << 20;

  // Algorithm cache for cuBLASLt, keyed by a GEMM's full description (lt_gemm.cu).
  using AlgoKey = std::array<std::int64_t, 18>;
  struct Algo {
    cublasLtMatmulAlgo_t algo;
    cublasComputeType_t compute;  // the one asked for, or fp32 where TF32 had no algorithm
  };
  std::map<AlgoKey, Algo>& algos() { return algos_; }

 private:
  explicit Context(int device);

  int device_ = 0, cc_ = 0, sms_ = 0;
  std::string no_code_;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr, mark_ = nullptr;
  void* lt_ws_[kSlots] = {nullptr, nullptr};
  void* scratch_[kSlots] = {nullptr, nullptr};
  std::size_t scratch_bytes_[kSlots] = {0, 0};
  std::map<AlgoKey, Algo> algos_;
  LtTune lt_tune_;
  bool plain_gemm_ = false;
  cudaStream_t last_stream_ = nullptr;
  bool claimed_ = false;
  cudaEvent_t handoff_ = nullptr;
  unsigned* counters_ = nullptr;
  std::size_t counters_n_ = 0;
  std::uint64_t generation_ = 0;  // bumped by every scratch or counter reallocation
  struct Graph {
    std::uint64_t generation = 0;
    cudaGraphExec_t exec = nullptr;
    bool direct = false;       // capture failed once: this key runs directly
    std::uint64_t launches = 0;  // of exec
  };
  static constexpr std::size_t kMaxKeys = 256, kMaxGraphs = 64;
  std::map<GraphKey, Graph> graphs_;
  std::size_t execs_ = 0, wasted_ = 0;  // graphs held; graphs dropped without a replay
  bool capture_off_ = false;
  std::string failure_;  // GraphStats::failure
  void fail(const std::string& cause) {
    if (failure_.empty()) failure_ = cause;  // the first: later ones may only be its consequences
  }
  void drop_graphs(cudaStream_t stream);
  cudaStream_t capture_ = nullptr;
  // begin_host_copy / finish_host_copy: the copy stream (created at first use), its events and pinned staging.
  cudaStream_t copy_ = nullptr;
  cudaEvent_t copy_after_ = nullptr, copy_done_ = nullptr;
  void* pinned_ = nullptr;
  std::size_t pinned_bytes_ = 0;
  bool capturing_ = false;  // scratch or counters must not grow inside a capture
};

}  // namespace attnbwd::cuda
