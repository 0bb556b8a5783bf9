// One float32 GEMM on tensor cores in TF32 through cuBLAS (row-major, contiguous):
//   C[M, N] = A[M, K] @ B[K, N]
// The operands are used as given: callers pass them already split so that each element is exact
// in tf32 (gemm_tf32x3.cpp: the 3xTF32 split with K tripled), which makes cuBLAS's TF32 mode exact
// in the products. Built only where the cuBLAS headers were found (csrc/build.py defines
// MD_ACCEL_WITH_CUBLAS); elsewhere cublas_tf32_available() is false.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace md_accel {

bool cublas_tf32_available();

// Bytes of workspace to hand to cublas_tf32_gemm (cuBLAS's recommendation for Hopper).
constexpr size_t kCublasWorkspaceBytes = size_t(32) << 20;

// Returns nullptr on success, else a static error message. workspace: kCublasWorkspaceBytes,
// owned by the caller for as long as the work on `stream` (or a CUDA graph capturing it) needs it.
// The first call on a thread and device creates a cuBLAS handle: make it before a graph capture.
const char* cublas_tf32_gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n,
                             void* workspace, cudaStream_t stream);

}  // namespace md_accel
