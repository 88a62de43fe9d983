#include "lt_gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "check.hpp"
#include "head_split.hpp"
#include "switches.hpp"

namespace attnbwd::cuda {
namespace {

std::uint64_t bytes_of(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return 4;
    case CUDA_R_16BF:
    case CUDA_R_16F: return 2;
    default: return 1;
  }
}

// Largest power of two (≤ 16) dividing every byte offset at which a matrix of the batch, or one of
// its columns, can start: cuBLASLt algorithms depend on it.
int alignment(const void* p, cudaDataType_t t, std::int64_t ld, std::int64_t stride) {
  const std::uint64_t a = reinterpret_cast<std::uintptr_t>(p) | (static_cast<std::uint64_t>(ld) * bytes_of(t)) |
                          (static_cast<std::uint64_t>(stride) * bytes_of(t)) | 16u;
  return static_cast<int>(a & (~a + 1));  // lowest set bit
}

struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, std::int64_t rows, std::int64_t cols, std::int64_t ld, int count, std::int64_t stride,
         bool pointer_array) {
    ATTNBWD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, t, static_cast<std::uint64_t>(rows),
                                                    static_cast<std::uint64_t>(cols), ld));
    if (pointer_array) {
      const std::uint32_t mode = CUBLASLT_BATCH_MODE_POINTER_ARRAY;
      ATTNBWD_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      ATTNBWD_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, &mode, sizeof mode));
    } else if (count > 1) {
      ATTNBWD_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
      ATTNBWD_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                            &stride, sizeof stride));
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

struct Desc {
  cublasLtMatmulDesc_t h = nullptr;
  Desc(cublasComputeType_t compute, const Gemm& g) {
    // cuBLASLt is column-major: a row-major C[M,N] is the column-major Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ, so the
    // call computes Cᵀ with the operands swapped: first operand = our B, second = our A.
    const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&h, compute, CUDA_R_32F));
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
    ATTNBWD_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
    if (g.sm_target > 0)
      ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(h, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &g.sm_target,
                                                          sizeof g.sm_target));
  }
  ~Desc() { cublasLtMatmulDescDestroy(h); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};

__device__ __forceinline__ float load_as_float(const void* p, std::int64_t i, cudaDataType_t t) {
  switch (t) {
    case CUDA_R_16BF: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case CUDA_R_16F: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// ATTNBWD_CUDA_SANITIZE_GEMM=plain (compute-sanitizer runs only): every GEMM of the fast path through
// this kernel instead of cuBLASLt, one thread per element of C, an fp32 sum in k order, no shared
// memory and no barriers. racecheck must instrument cuBLASLt's own kernels (excluding them makes it
// fail with an internal error, H200/CUDA 13), which costs 10+ minutes per large workload; with this
// route racecheck and initcheck see only kernels of ours (a pointer-array batch reads its matrices' addresses from the
// arrays, as cuBLASLt does). Results agree with cuBLASLt to rounding;
// the route is slow and is not a product mode (README "Reliability").
__global__ void plain_gemm(Gemm g, const void* A0, const void* B0, void* C0, float alpha, float beta) {
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (n >= g.N) return;
  for (int b = blockIdx.z; b < g.count; b += gridDim.z) {
    for (std::int64_t m = blockIdx.y; m < g.M; m += gridDim.y) {
      const std::int64_t oa = g.pointer_array ? 0 : b * g.stride_a, ob = g.pointer_array ? 0 : b * g.stride_b,
                         oc = (g.pointer_array ? 0 : b * g.stride_c) + m * g.ldc + n;
      const void* A = g.pointer_array ? static_cast<const void* const*>(A0)[b] : A0;
      const void* B = g.pointer_array ? static_cast<const void* const*>(B0)[b] : B0;
      void* C = g.pointer_array ? static_cast<void* const*>(C0)[b] : C0;
      float acc = 0.0f;
      for (std::int64_t k = 0; k < g.K; ++k) {
        const float x = load_as_float(A, oa + (g.trans_a ? k * g.lda + m : m * g.lda + k), g.a_type);
        const float y = load_as_float(B, ob + (g.trans_b ? n * g.ldb + k : k * g.ldb + n), g.b_type);
        acc = fmaf(x, y, acc);
      }
      float c = alpha * acc;
      if (beta != 0.0f) c += beta * load_as_float(C, oc, g.c_type);
      if (g.c_type == CUDA_R_16BF) {
        static_cast<__nv_bfloat16*>(C)[oc] = __float2bfloat16_rn(c);
      } else if (g.c_type == CUDA_R_16F) {
        static_cast<__half*>(C)[oc] = __float2half_rn(c);
      } else {
        static_cast<float*>(C)[oc] = c;
      }
    }
  }
}

// ---- ATTNBWD_CUDA_LT_TUNE: the first call of a GEMM description times cuBLASLt's candidates ----------------------
constexpr int kTuneCandidates = 16;
constexpr int kTuneRounds = 3;

// Whether work enqueued on `stream` is being captured into a graph (ours or the caller's): then nothing may be
// timed or synchronised, and the first heuristic answer is taken.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
    cudaGetLastError();  // e.g. the legacy stream while another stream captures: treat as capturing
    return true;
  }
  return st != cudaStreamCaptureStatusNone;
}

// Timed choices (and the first answers cached in their place where timing was skipped: a capture, the cap) shared
// by every context of the process, keyed by device and description: the first context (thread) to choose decides for
// all, so a process's calls give the same bits in every thread. At most kMaxTimed descriptions are timed per process
// (a caller whose shapes change every call pays a bounded number of timings, then first answers).
constexpr int kMaxTimed = 128;
struct SharedChoices {
  std::mutex m;
  std::map<std::pair<int, Context::AlgoKey>, Context::Algo> choices;
  int timed = 0;
};
SharedChoices& shared_choices() {
  static SharedChoices s;
  return s;
}

// One cublasLtMatmul of gemm()'s description with a given algorithm: the timed runs and the call itself.
struct LtCall {
  Context* ctx;
  int slot;
  cudaStream_t stream;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t first, second, out;
  const void *A, *B;
  void* C;
  float alpha, beta;
  cublasStatus_t run(const cublasLtMatmulAlgo_t& algo) const {
    return cublasLtMatmul(ctx->lt(), desc, &alpha, B, first, A, second, &beta, C, out, C, out, &algo,
                          ctx->lt_workspace(slot), Context::kLtWorkspaceBytes, stream);
  }
};

// Times each usable candidate kTuneRounds times on `call.stream` (round-robin, each run after a write of twice
// the L2 so that every run starts with cold caches, as a call does; the write is skipped where its buffer
// cannot be had) and returns the index of the fastest by its best round; a candidate must beat the first
// answer by `gain` (2 % by default) to be taken (timing noise must not flip choices between processes for nothing). The runs
// write C (call.beta = 0 only: the chosen algorithm's run afterwards writes it again). Synchronises the stream.
int tune_pick(const LtCall& call, const cublasLtMatmulHeuristicResult_t* res, int found, bool verbose, float gain,
              const Gemm& g) {
  std::vector<int> cand;
  for (int i = 0; i < found; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= Context::kLtWorkspaceBytes) cand.push_back(i);
  if (cand.size() < 2) return 0;
  int l2 = 0;
  ATTNBWD_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, call.ctx->device()));
  const std::size_t flush_bytes = 2 * static_cast<std::size_t>(l2);
  struct Flush {  // freed (stream-ordered) also when a check below throws
    void* p = nullptr;
    cudaStream_t s;
    ~Flush() {
      if (p) cudaFreeAsync(p, s);
    }
  } flush_buf{nullptr, call.stream};
  void*& flush = flush_buf.p;
  if (cudaMallocAsync(&flush, flush_bytes, call.stream) != cudaSuccess) {
    cudaGetLastError();
    flush = nullptr;
  }
  const std::size_t n = cand.size();
  struct Events {  // destroyed also when a check below throws
    std::vector<cudaEvent_t> e;
    ~Events() {
      for (cudaEvent_t x : e)
        if (x) cudaEventDestroy(x);
    }
  } events{std::vector<cudaEvent_t>(2 * n * kTuneRounds, nullptr)};
  std::vector<cudaEvent_t>& ev = events.e;
  for (auto& e : ev) ATTNBWD_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<bool> ok(n, true);
  for (int r = 0; r < kTuneRounds; ++r)
    for (std::size_t c = 0; c < n; ++c) {
      if (!ok[c]) continue;
      if (flush) ATTNBWD_CUDA_CHECK(cudaMemsetAsync(flush, r, flush_bytes, call.stream));
      cudaEvent_t* e = &ev[2 * (r * n + c)];
      ATTNBWD_CUDA_CHECK(cudaEventRecord(e[0], call.stream));
      if (call.run(res[cand[c]].algo) != CUBLAS_STATUS_SUCCESS) {
        ok[c] = false;      // not timed again
        cudaGetLastError();  // a launch error it may have left must not be blamed on a later kernel of ours
      }
      ATTNBWD_CUDA_CHECK(cudaEventRecord(e[1], call.stream));
    }
  if (flush) {
    ATTNBWD_CUDA_CHECK(cudaFreeAsync(flush, call.stream));
    flush = nullptr;
  }
  ATTNBWD_CUDA_CHECK(cudaStreamSynchronize(call.stream));
  std::vector<float> best(n, 1e30f);
  for (int r = 0; r < kTuneRounds; ++r)
    for (std::size_t c = 0; c < n; ++c) {
      if (!ok[c]) continue;
      float ms = 0.0f;
      ATTNBWD_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[2 * (r * n + c)], ev[2 * (r * n + c) + 1]));
      best[c] = std::min(best[c], ms);
    }
  std::size_t pick = 0;
  for (std::size_t c = 1; c < n; ++c)
    if (ok[c] && best[c] < best[pick]) pick = c;
  if (ok[0] && best[pick] >= (1.0f - gain) * best[0]) pick = 0;
  if (!ok[pick]) return 0;  // nothing ran: the first answer, whose failure the real call reports
  if (verbose)
    std::fprintf(stderr,
                 "attnbwd lt_tune: %lldx%lldx%lld batch %d trans %d%d types %d,%d,%d: candidate %d of %zu, %.2f us "
                 "(first answer %.2f us; -1: it failed)\n",
                 static_cast<long long>(g.M), static_cast<long long>(g.N), static_cast<long long>(g.K), g.count,
                 g.trans_a ? 1 : 0, g.trans_b ? 1 : 0, static_cast<int>(g.a_type), static_cast<int>(g.b_type),
                 static_cast<int>(g.c_type), cand[pick], n, 1e3 * best[pick], ok[0] ? 1e3 * best[0] : -1.0);
  return cand[pick];
}

}  // namespace

namespace {
std::atomic<long> pointer_array_gemms{0};
}  // namespace

long lt_pointer_array_gemms() { return pointer_array_gemms.load(); }

int lt_timed_descriptions() {
  SharedChoices& s = shared_choices();
  const std::lock_guard<std::mutex> lock(s.m);
  return s.timed;
}

void lt_forget_timed_choices() {
  SharedChoices& s = shared_choices();
  const std::lock_guard<std::mutex> lock(s.m);
  s.choices.clear();
  s.timed = 0;
}

void gemm(Context& ctx, int slot, cudaStream_t stream, const Gemm& g, const void* A, const void* B, void* C,
          float alpha, float beta) {
  if (g.pointer_array && (g.ptr_align <= 0 || g.ptr_align > 16 || (g.ptr_align & (g.ptr_align - 1)) != 0))
    throw Error("cuda backend: a pointer-array GEMM needs ptr_align, the alignment of its matrices (1-16 bytes, a power "
                "of two), not " + std::to_string(g.ptr_align));
  if (g.pointer_array) ++pointer_array_gemms;
  if (ctx.plain_gemm()) {  // ATTNBWD_CUDA_SANITIZE_GEMM=plain, read by Context::claim
    if (g.M <= 0 || g.N <= 0 || g.count <= 0) return;
    const dim3 grid(static_cast<unsigned>((g.N + 127) / 128), static_cast<unsigned>(g.M < 65535 ? g.M : 65535),
                    static_cast<unsigned>(g.count < 65535 ? g.count : 65535));
    plain_gemm<<<grid, 128, 0, stream>>>(g, A, B, C, alpha, beta);
    ATTNBWD_CUDA_CHECK_LAUNCH();
    return;
  }
  // Column-major shapes of the stored matrices: our row-major X[r,c] with ld is column-major [c,r].
  const bool pa = g.pointer_array;
  Layout first(g.b_type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, g.count, g.stride_b, pa);
  Layout second(g.a_type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, g.count, g.stride_a, pa);
  Layout out(g.c_type, g.N, g.M, g.ldc, g.count, g.stride_c, pa);

  // A pointer-array batch: the matrices' alignment is the caller's promise (the arrays' own addresses say nothing of
  // it), and the strides are unused (-1 in the key: no strided batch has it).
  const auto start = [&](const void* p) {
    return pa ? reinterpret_cast<const void*>(static_cast<std::uintptr_t>(g.ptr_align)) : p;
  };
  const std::int64_t sa = pa ? 0 : g.stride_a, sb = pa ? 0 : g.stride_b, sc = pa ? 0 : g.stride_c;
  const int al_a = alignment(start(B), g.b_type, g.ldb, sb), al_b = alignment(start(A), g.a_type, g.lda, sa),
            al_c = alignment(start(C), g.c_type, g.ldc, sc);
  // Whether this description's algorithm is timed at its first call (Context::LtTune, set by claim from
  // ATTNBWD_CUDA_LT_TUNE): part of the key, so timed and first-answer choices are cached apart.
  const Context::LtTune& lt = ctx.lt_tune();
  const int tune = (lt.main_only && slot != 0) || g.first_answer ? 0 : lt.mode;
  const Context::AlgoKey key{g.trans_a,
                             g.trans_b,
                             g.M,
                             g.N,
                             g.K,
                             g.lda,
                             g.ldb,
                             g.ldc,
                             (static_cast<std::int64_t>(g.a_type) * 1000 + g.b_type) * 1000 + g.c_type,
                             static_cast<std::int64_t>(g.compute),
                             al_a * 10000 + al_b * 100 + al_c,
                             beta != 0.0f,
                             g.count,
                             pa ? -1 : g.stride_a,
                             pa ? -1 : g.stride_b,
                             pa ? -1 : g.stride_c,
                             tune != 0,
                             g.sm_target};
  auto& cache = ctx.algos();
  auto it = cache.find(key);
  SharedChoices& shared = shared_choices();
  const std::pair<int, Context::AlgoKey> shared_key{ctx.device(), key};
  if (it == cache.end() && tune) {  // another context (thread) of this process may have chosen already
    const std::lock_guard<std::mutex> lock(shared.m);
    const auto f = shared.choices.find(shared_key);
    if (f != shared.choices.end()) it = cache.emplace(key, f->second).first;
  }
  if (it == cache.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } pref_guard{pref};
    const std::uint64_t ws = Context::kLtWorkspaceBytes;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    // Split-K partial sums in fp32 only: INPLACE adds them in the output type, so only for fp32 C.
    std::uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    if (g.c_type == CUDA_R_32F) schemes |= CUBLASLT_REDUCTION_SCHEME_INPLACE;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
    const std::uint32_t a1 = static_cast<std::uint32_t>(al_a), a2 = static_cast<std::uint32_t>(al_b),
                        a3 = static_cast<std::uint32_t>(al_c);
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a1, sizeof a1));
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &a2, sizeof a2));
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &a3, sizeof a3));
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &a3, sizeof a3));
    // TF32 algorithms may need more alignment than odd leading dimensions give: then full fp32
    // (more accurate, never less).
    std::vector<cublasComputeType_t> tries{g.compute};
    if (g.compute == CUBLAS_COMPUTE_32F_FAST_TF32) tries.push_back(CUBLAS_COMPUTE_32F);
    for (const cublasComputeType_t c : tries) {
      Desc desc(c, g);
      cublasLtMatmulHeuristicResult_t results[kTuneCandidates] = {};
      int found = 0;
      const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc.h, first.h, second.h, out.h, out.h,
                                                               pref, tune ? kTuneCandidates : 1, results, &found);
      if (st == CUBLAS_STATUS_SUCCESS && found > 0 && results[0].state == CUBLAS_STATUS_SUCCESS) {
        int pick = 0;
        bool time_it = false;
        // Accumulating GEMMs (beta != 0: gqa's dXk and dXv add into grad_hidden_states) take the first answer: the
        // timing runs would write C, an input there. Timed on a scratch of C's footprint instead (forty-first
        // session, H100, perf/NOTES.md) the first answer won at #0 and the calls were no faster (0.986-1.006x).
        if (tune && found > 1 && beta == 0.0f && !capturing(stream)) {
          const std::lock_guard<std::mutex> lock(shared.m);
          if (shared.timed < kMaxTimed) ++shared.timed, time_it = true;
        }
        if (time_it) {
          const LtCall call{&ctx, slot, stream, desc.h, first.h, second.h, out.h, A, B, C, alpha, beta};
          pick = tune_pick(call, results, found, tune == 2, lt.gain, g);
        }
        Context::Algo chosen{results[pick].algo, c};
        if (tune) {  // the first choice made in the process stands (two contexts may have timed at once)
          const std::lock_guard<std::mutex> lock(shared.m);
          chosen = shared.choices.emplace(shared_key, chosen).first->second;
        }
        it = cache.emplace(key, chosen).first;
        break;
      }
    }
    if (it == cache.end())
      throw Error("cuda backend: cuBLASLt has no algorithm for a " + std::to_string(g.M) + "x" +
                  std::to_string(g.N) + "x" + std::to_string(g.K) + " GEMM (batch " + std::to_string(g.count) + ")");
  }
  Desc desc(it->second.compute, g);
  ATTNBWD_CUBLAS_CHECK(
      (LtCall{&ctx, slot, stream, desc.h, first.h, second.h, out.h, A, B, C, alpha, beta}.run(it->second.algo)));
}

namespace {
struct PointerList {
  const void* p[3 * kMaxListed];
  int n;
};
__global__ void listed_pointers(PointerList l, void** out) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < l.n) out[i] = const_cast<void*>(l.p[i]);
}
}  // namespace

void gemm_listed(Context& ctx, int slot, cudaStream_t stream, const ListedGemm& l, void** ptrs) {
  const int n = l.g.count;
  if (n < 1 || n > kMaxListed)
    throw Error("cuda backend: a listed GEMM batch takes 1 to " + std::to_string(kMaxListed) + " GEMMs, not " +
                std::to_string(n));
  PointerList p{};
  p.n = 3 * n;
  std::uint64_t x = 16;  // every matrix start is a multiple of this many bytes
  for (int i = 0; i < n; ++i) {
    p.p[i] = l.a[i], p.p[n + i] = l.b[i], p.p[2 * n + i] = l.c[i];
    x |= reinterpret_cast<std::uintptr_t>(l.a[i]) | reinterpret_cast<std::uintptr_t>(l.b[i]) |
         reinterpret_cast<std::uintptr_t>(l.c[i]);
  }
  static_assert(3 * kMaxListed <= 64, "one thread per listed address");
  listed_pointers<<<1, 64, 0, stream>>>(p, ptrs);
  ATTNBWD_CUDA_CHECK_LAUNCH();
  Gemm g = l.g;
  g.pointer_array = true, g.ptr_align = static_cast<int>(x & (~x + 1));
  gemm(ctx, slot, stream, g, ptrs, ptrs + n, ptrs + 2 * n);
}

void gemm_into_heads(Context& ctx, int slot, cudaStream_t stream, const HeadsGemm& h, void** ptrs) {
  const std::int64_t n = h.B * h.H;
  const HeadOperand ops[3] = {{h.dy, h.S * h.K, 0}, {h.w, 0, h.D}, {h.out, h.H * h.S * h.D, h.S * h.D}};
  head_pointers(ops, h.B, h.H, ptrs, stream);
  // Every matrix start (dY_b, W's columns h·D.., out[b, h]) is a multiple of this many bytes.
  const std::uint64_t x = reinterpret_cast<std::uintptr_t>(h.dy) | reinterpret_cast<std::uintptr_t>(h.w) |
                          reinterpret_cast<std::uintptr_t>(h.out) | static_cast<std::uint64_t>(h.S * h.K * 2) |
                          static_cast<std::uint64_t>(h.D * 2) | static_cast<std::uint64_t>(h.S * h.D * 2) | 16u;
  const std::int64_t per = h.batches_per_piece > 0 ? h.batches_per_piece : h.B;
  for (std::int64_t b0 = 0; b0 < h.B; b0 += per) {
    Gemm g;  // per (b, h): [S, K]·[K, D] (W's columns h·D.., row stride ldw) into [S, D]
    g.M = h.S, g.N = h.D, g.K = h.K, g.lda = h.K, g.ldb = h.ldw, g.ldc = h.D;
    g.count = static_cast<int>(std::min(per, h.B - b0) * h.H);
    g.pointer_array = true, g.ptr_align = static_cast<int>(x & (~x + 1));
    g.sm_target = h.sm_target;
    gemm(ctx, slot, stream, g, ptrs + b0 * h.H, ptrs + n + b0 * h.H, ptrs + 2 * n + b0 * h.H);
  }
}

}  // namespace attnbwd::cuda
