// cublas_tf32.h: one TF32 GEMM through cuBLAS, on a handle of md_accel's own per thread and device
// (not torch's: torch's handle comes with a TF32 switch that is global state of the user's).
#include "cublas_tf32.h"

#if MD_ACCEL_WITH_CUBLAS
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#endif

namespace md_accel {

#if MD_ACCEL_WITH_CUBLAS

bool cublas_tf32_available() { return true; }

namespace {
constexpr int kMaxDevices = 64;

// This thread's handle on the current device, created at first use and kept for the thread's
// life (not destroyed at exit: the CUDA context may be gone by then, as torch's pool also assumes).
const char* current_handle(cublasHandle_t* out) {
  thread_local cublasHandle_t handles[kMaxDevices] = {};
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    cudaGetLastError();
    return "cudaGetDevice failed";
  }
  if (handles[dev] == nullptr && cublasCreate(&handles[dev]) != CUBLAS_STATUS_SUCCESS) {
    handles[dev] = nullptr;
    return "cublasCreate failed";
  }
  *out = handles[dev];
  return nullptr;
}
}  // namespace

const char* cublas_tf32_gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n,
                             void* workspace, cudaStream_t stream) {
  if (m < 0 || k < 0 || n < 0 || k > INT_MAX || n > INT_MAX) return "GEMM sizes out of range";
  if (m == 0 || n == 0) return nullptr;
  cublasHandle_t h = nullptr;
  if (const char* err = current_handle(&h)) return err;
  if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(h, workspace, kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS)
    return "cublasSetStream / cublasSetWorkspace failed";
  const float one = 1.f, zero = 0.f;
  // row-major C = A B is column-major C^T = B^T A^T: cuBLAS's (m, n, k) = (N, rows, K), no transposes;
  // rows in slices that fit cuBLAS's int sizes
  constexpr int64_t kMaxRows = int64_t(1) << 30;
  for (int64_t r0 = 0; r0 < m; r0 += kMaxRows) {
    const int rows = int(std::min(kMaxRows, m - r0));
    const cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, int(n), rows, int(k), &one, b, CUDA_R_32F,
                                          int(n), a + r0 * k, CUDA_R_32F, int(k), &zero, c + r0 * n, CUDA_R_32F,
                                          int(n), CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS) return cublasGetStatusString(s);
  }
  return nullptr;
}

#else

bool cublas_tf32_available() { return false; }

const char* cublas_tf32_gemm(const float*, const float*, float*, int64_t, int64_t, int64_t, void*, cudaStream_t) {
  return "md_accel was built without the cuBLAS headers";
}

#endif

}  // namespace md_accel
