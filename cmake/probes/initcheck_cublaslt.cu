// Probe for compute-sanitizer initcheck (run by cmake/device-check.sh, step initcheck-probe): does
// initcheck see the stores of a cuBLASLt GEMM? A bf16 GEMM D = A·B (M = 256, N = K = 2048: the dX GEMM
// of out_proj workload #8) writes D, then a plain kernel reads all of D.
//   initcheck_cublaslt gemm     D fresh from cudaMalloc, written only by cuBLASLt
//   initcheck_cublaslt memset   D zeroed by cudaMemset first, then written by cuBLASLt
//   initcheck_cublaslt kernel   D written by a plain CUDA kernel (control)
// Under `compute-sanitizer --tool initcheck`, a report in "gemm" mode and none in the other two
// means initcheck misses the GEMM's stores: reads of GEMM results are false positives, which the
// library's ATTNBWD_CUDA_SANITIZE_INIT=1 (zeroed scratch) silences in initcheck runs.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                 \
  do {                                                                        \
    if (!(x)) {                                                               \
      std::fprintf(stderr, "probe: %s failed at line %d\n", #x, __LINE__);    \
      std::exit(2);                                                           \
    }                                                                         \
  } while (0)

__global__ void fill(__nv_bfloat16* p, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16(0.25f);
}

__global__ void read_all(const __nv_bfloat16* p, long n, float* sum) {
  float s = 0.f;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x)
    s += __bfloat162float(p[i]);
  atomicAdd(sum, s);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "gemm";
  const long M = 256, N = 2048, K = 2048;
  __nv_bfloat16 *A, *B, *D;
  float* sum;
  void* ws;
  const size_t ws_bytes = 32u << 20;
  CK(cudaMalloc(&A, M * K * 2) == cudaSuccess);
  CK(cudaMalloc(&B, K * N * 2) == cudaSuccess);
  CK(cudaMalloc(&D, M * N * 2) == cudaSuccess);
  CK(cudaMalloc(&sum, sizeof(float)) == cudaSuccess);
  CK(cudaMalloc(&ws, ws_bytes) == cudaSuccess);
  CK(cudaMemset(sum, 0, sizeof(float)) == cudaSuccess);
  fill<<<256, 256>>>(A, M * K);
  fill<<<256, 256>>>(B, K * N);
  if (std::strcmp(mode, "kernel") == 0) {
    fill<<<256, 256>>>(D, M * N);
  } else {
    if (std::strcmp(mode, "memset") == 0) CK(cudaMemset(D, 0, M * N * 2) == cudaSuccess);
    cublasLtHandle_t lt;
    CK(cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t op;
    CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    // Column-major view: D^T (N x M) = B^T (N x K) * A^T (K x M), all row-major buffers as-is.
    cublasLtMatrixLayout_t lb, la, ld;
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, N, K, N) == CUBLAS_STATUS_SUCCESS);
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, M, K) == CUBLAS_STATUS_SUCCESS);
    CK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, N, M, N) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)) == CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    CK(cublasLtMatmulAlgoGetHeuristic(lt, op, lb, la, ld, ld, pref, 1, &h, &found) == CUBLAS_STATUS_SUCCESS &&
       found == 1);
    const float one = 1.f, zero = 0.f;
    CK(cublasLtMatmul(lt, op, &one, B, lb, A, la, &zero, D, ld, D, ld, &h.algo, ws, ws_bytes, 0) ==
       CUBLAS_STATUS_SUCCESS);
  }
  read_all<<<64, 256>>>(D, M * N, sum);
  float host = 0.f;
  CK(cudaMemcpy(&host, sum, sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  std::printf("probe %s: sum of D = %g\n", mode, host);
  return 0;
}
