#include "lt_gemm.hpp"

#include <cstdint>
#include <string>

#include "check.hpp"

namespace attnbwd::cuda {
namespace {

// Largest power of two (≤ 16) dividing the address: cuBLASLt algorithms depend on it.
int alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int align = 16;
  while (align > 1 && (a % static_cast<std::uintptr_t>(align)) != 0) align /= 2;
  return align;
}

struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    ATTNBWD_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&h, t, static_cast<std::uint64_t>(rows),
                                                    static_cast<std::uint64_t>(cols), ld));
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
};

}  // namespace

void gemm(Context& ctx, int slot, cudaStream_t stream, const Gemm& g, const void* A, const void* B, void* C,
          float alpha, float beta) {
  // cuBLASLt is column-major: a row-major C[M,N] is the column-major Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ, so the
  // call computes Cᵀ with the operands swapped: first operand = our B, second = our A.
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // Column-major shapes of the stored matrices: our row-major X[r,c] with ld is column-major [c,r].
  Layout first(g.b_type, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb);
  Layout second(g.a_type, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda);
  Layout out(g.c_type, g.N, g.M, g.ldc);

  cublasLtMatmulDesc_t desc = nullptr;
  ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, g.compute, CUDA_R_32F));
  struct DescGuard {
    cublasLtMatmulDesc_t d;
    ~DescGuard() { cublasLtMatmulDescDestroy(d); }
  } desc_guard{desc};
  ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
  ATTNBWD_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));

  const int al_a = alignment(B), al_b = alignment(A), al_c = alignment(C);
  const Context::AlgoKey key{g.trans_a, g.trans_b, g.M, g.N, g.K, g.lda, g.ldb, g.ldc,
                             static_cast<int>(g.a_type) * 1000 + static_cast<int>(g.c_type),
                             static_cast<int>(g.compute), al_a * 10000 + al_b * 100 + al_c, beta != 0.0f};
  auto& cache = ctx.algos();
  auto it = cache.find(key);
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
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ATTNBWD_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.lt(), desc, first.h, second.h, out.h, out.h, pref, 1,
                                                        &result, &found));
    if (found == 0)
      throw Error("cuda backend: cuBLASLt has no algorithm for a " + std::to_string(g.M) + "x" +
                  std::to_string(g.N) + "x" + std::to_string(g.K) + " GEMM");
    it = cache.emplace(key, result.algo).first;
  }
  ATTNBWD_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), desc, &alpha, B, first.h, A, second.h, &beta, C, out.h, C, out.h,
                                      &it->second, ctx.lt_workspace(slot), Context::kLtWorkspaceBytes, stream));
}

}  // namespace attnbwd::cuda
