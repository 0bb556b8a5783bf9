// md_accel::gemm_3xtf32(a, b, transpose_b) -> a @ (b^T if transpose_b else b): schema, CPU
// implementation (the reference: a plain matmul, float32 / float64) and CUDA implementation
// (float32 only: tensor cores with the 3xTF32 split; float32 accuracy). On CUDA:
//  - small K, wide N (the radial MLP's last layer, K = 64): the split operands with K tripled
//    (gemm_3xtf32_split3) in one cuBLAS TF32 GEMM (cublas_tf32.h), which runs on Hopper's wgmma;
//    MD_ACCEL_GEMM_CUBLAS=0 in the environment selects the kernel below instead;
//  - otherwise (its input gradient, K = 512..1760, N = 64) md_accel's own kernel
//    (gemm_tf32x3_kernels.cu), which reads the large operand once;
//  - MD_ACCEL_GEMM_UNBIASED=1: every shape on the kernel's unbiased scheme. The tensor cores add
//    with truncation, which shifts every output toward zero by ~2e-7 of its size (cuBLAS and the
//    kernel's default scheme alike; benchmarks/gemm_tf32x3.py); the unbiased scheme adds the
//    truncation's mean back (mma.cuh) at 1.25-1.3x the GEMM time. With the default, a trained MACE
//    model's float32 energy stays within 5.4e-6 of float64 (the contract: 1e-5), 5.6e-7 unbiased;
//  - cuBLAS float32 (SIMT) on GPUs that kernel does not fit (see gemm_3xtf32_supported).
//
// a [M, K], b [K, N] (or [N, K] when transpose_b), K and N multiples of 8, any M; the output is
// a new contiguous [M, N] tensor. a may also be [G, K, d] (an equivariant linear's block: nodes x
// channels x components): then out [G, N, d], out[g, :, m] = a[g, :, m] @ B, computed on that
// layout directly (the kernel's grouped layout) instead of on transposed copies. No autograd
// kernel: callers wrap the op in their own autograd (the gradients are again gemm_3xtf32 calls:
// dA = dC @ B^T, dB = A^T @ dC).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cublas_tf32.h"
#include "grouped_mm.h"

namespace md_accel {

// gemm_tf32x3_kernels.cu
bool gemm_3xtf32_supported(int device);
int gemm_3xtf32_splits(int64_t m, int64_t k, int64_t n);
bool gemm_3xtf32_unbiased();
int64_t gemm_3xtf32_scratch_bytes(int64_t m, int64_t k, int64_t n, int splits);
const char* gemm_3xtf32_launch(const float* a, const float* b, bool trans_b, float* c, int64_t m, int64_t k,
                               int64_t n, int splits, void* scratch, cudaStream_t stream, int group_d,
                               int64_t group_lda);
const char* gemm_3xtf32_split3(const float* a, const float* b, bool trans_b, float* a3, float* b3, int64_t m,
                               int64_t k, int64_t n, cudaStream_t stream);

namespace {

using at::Tensor;

// "[d0, d1, ...]". The messages below format integers with std::to_string, not c10::str's
// std::ostringstream: raising a message with ostream-formatted integers from this library crashed
// the process on the GPU machine (H100, torch 2.11, 2026-11-25; CPU and CUDA tensors alike), while
// messages without integers (the dtype checks) raised cleanly.
std::string dims(const Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// Why a @ b (b^T when transpose_b) is not a valid call, or "" when it is.
std::string shape_error(const Tensor& a, const Tensor& b, bool transpose_b) {
  if ((a.dim() != 2 && a.dim() != 3) || b.dim() != 2)
    return "a must be 2-D or 3-D and b 2-D, got " + dims(a) + " and " + dims(b);
  const int64_t K = a.size(1), N = transpose_b ? b.size(0) : b.size(1);
  if ((transpose_b ? b.size(1) : b.size(0)) != K)
    return "shapes " + dims(a) + " and " + dims(b) + (transpose_b ? " (b transposed)" : "") + " do not match";
  if (K % 8 != 0 || N % 8 != 0)
    return "K (" + std::to_string(K) + ") and N (" + std::to_string(N) + ") must be multiples of 8";
  if (a.device() != b.device()) return "a and b must be on the same device";
  if (a.scalar_type() != b.scalar_type()) return "a and b must have the same dtype";
  return "";
}

// The specification: a @ B, for a 3-D a [G, K, d] per group and component: out[g, :, m] = a[g, :, m] @ B.
Tensor matmul_ref(const Tensor& a, const Tensor& b, bool transpose_b) {
  const Tensor bb = transpose_b ? b.t() : b;
  if (a.dim() == 3) return grouped_mm(a, bb);
  return a.mm(bb).contiguous();
}

Tensor gemm_3xtf32_cpu(const Tensor& a, const Tensor& b, bool transpose_b) {
  const std::string err = shape_error(a, b, transpose_b);
  TORCH_CHECK(err.empty(), "md_accel gemm_3xtf32: ", err);
  TORCH_CHECK(a.scalar_type() == at::kFloat || a.scalar_type() == at::kDouble,
              "md_accel gemm_3xtf32: float32 or float64 on the CPU, got ", a.scalar_type());
  return matmul_ref(a, b, transpose_b);
}

// a [G, K, d] @ B -> [G, N, d] on the kernel's grouped layout (no transposed copies of a or the output)
Tensor gemm_grouped_cuda(const Tensor& a_, const Tensor& b_, bool transpose_b, int64_t K, int64_t N) {
  Tensor a = a_;
  // the kernel's layout: components adjacent, channels d apart, groups apart by at least K * d
  // (an expanded a, groups 0 apart, is copied)
  if (a.stride(2) != 1 || a.stride(1) != a.size(2) || (a.size(0) > 1 && a.stride(0) < K * a.size(2)))
    a = a.contiguous();
  const Tensor b = b_.contiguous();
  const int64_t G = a.size(0), d = a.size(2), M = G * d;
  if (d > 0x7fffffffLL) return matmul_ref(a, b, transpose_b);  // the kernel takes d as an int
  Tensor out = at::empty({G, N, d}, a.options());
  if (M == 0 || N == 0) return out;
  const int64_t lda = G > 1 ? a.stride(0) : K * d;
  const Tensor scratch = at::empty({gemm_3xtf32_scratch_bytes(M, K, N, 1)}, a.options().dtype(at::kByte));
  auto stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  const char* err = gemm_3xtf32_launch(a.data_ptr<float>(), b.data_ptr<float>(), transpose_b, out.data_ptr<float>(), M,
                                       K, N, 1, scratch.data_ptr(), stream, int(d), lda);
  TORCH_CHECK(err == nullptr, "md_accel gemm_3xtf32: ", err);
  return out;
}

constexpr int kMaxDevices = 64;
std::atomic<bool> g_cublas_failed[kMaxDevices];  // cuBLAS failed on the device once: the kernel serves

// Whether a [M, K] @ B [K, N] goes to cuBLAS with K tripled: there the copy a3 [M, 3K] is at most
// as large as the output (N >= 3K) and K is small enough that the GEMM is bound by writing C.
bool use_cublas_split3(int device, int64_t K, int64_t N) {
  const char* v = std::getenv("MD_ACCEL_GEMM_CUBLAS");
  if ((v != nullptr && std::strcmp(v, "0") == 0) || gemm_3xtf32_unbiased()) return false;
  if (device < 0 || device >= kMaxDevices || g_cublas_failed[device].load(std::memory_order_relaxed)) return false;
  return cublas_tf32_available() && K >= 8 && K <= 128 && N >= 3 * K;
}

// a @ B through cuBLAS (see use_cublas_split3); an undefined tensor where cuBLAS failed (the
// caller then runs the kernel; the device is not tried again, with one warning)
Tensor gemm_cublas_split3(const Tensor& a, const Tensor& b, bool transpose_b, int64_t K, int64_t N) {
  const int64_t M = a.size(0);
  Tensor out = at::empty({M, N}, a.options());
  if (M == 0) return out;
  Tensor a3 = at::empty({M, 3 * K}, a.options()), b3 = at::empty({3 * K, N}, a.options());
  const Tensor workspace = at::empty({int64_t(kCublasWorkspaceBytes)}, a.options().dtype(at::kByte));
  auto stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  const char* err = gemm_3xtf32_split3(a.data_ptr<float>(), b.data_ptr<float>(), transpose_b, a3.data_ptr<float>(),
                                       b3.data_ptr<float>(), M, K, N, stream);
  TORCH_CHECK(err == nullptr, "md_accel gemm_3xtf32: ", err);
  err = cublas_tf32_gemm(a3.data_ptr<float>(), b3.data_ptr<float>(), out.data_ptr<float>(), M, 3 * K, N,
                         workspace.data_ptr(), stream);
  if (err != nullptr) {
    g_cublas_failed[a.device().index()].store(true, std::memory_order_relaxed);
    TORCH_WARN("md_accel gemm_3xtf32: cuBLAS failed (", err, "); md_accel's kernel serves this device from now on");
    return Tensor();
  }
  return out;
}

Tensor gemm_3xtf32_cuda(const Tensor& a_, const Tensor& b_, bool transpose_b) {
  const std::string shapes = shape_error(a_, b_, transpose_b);
  TORCH_CHECK(shapes.empty(), "md_accel gemm_3xtf32: ", shapes);
  const int64_t K = a_.size(1), N = transpose_b ? b_.size(0) : b_.size(1);
  TORCH_CHECK(a_.scalar_type() == at::kFloat, "md_accel gemm_3xtf32: float32 only on CUDA, got ", a_.scalar_type());
  TORCH_CHECK(a_.is_cuda(), "md_accel gemm_3xtf32: CUDA tensors expected");
  TORCH_CHECK(K < (int64_t(1) << 24) && K * N <= 0x7fffffffLL, "md_accel gemm_3xtf32: b too large");
  c10::cuda::CUDAGuard guard(a_.device());
  const int device = a_.device().index();
  // GPUs without the kernel's needs (sm_80 tensor cores, ~105 KB shared memory per block):
  // cuBLAS float32 (SIMT), the same accuracy class
  if (!gemm_3xtf32_supported(device)) return matmul_ref(a_, b_, transpose_b);
  if (a_.dim() == 3) return gemm_grouped_cuda(a_, b_, transpose_b, K, N);
  if (use_cublas_split3(device, K, N)) {
    Tensor out = gemm_cublas_split3(a_.contiguous(), b_.contiguous(), transpose_b, K, N);
    if (out.defined()) return out;
  }
  Tensor a = a_.contiguous();
  if (reinterpret_cast<uintptr_t>(a.data_ptr()) % 16 != 0) a = a.clone();  // cp.async needs 16-byte rows
  const Tensor b = b_.contiguous();
  const int64_t M = a.size(0);
  Tensor out = at::empty({M, N}, a.options());
  if (M == 0 || N == 0) return out;
  const int splits = gemm_3xtf32_splits(M, K, N);  // once: the scratch and the launch agree
  const Tensor scratch = at::empty({gemm_3xtf32_scratch_bytes(M, K, N, splits)}, a.options().dtype(at::kByte));
  auto stream = c10::cuda::getCurrentCUDAStream(a.device().index()).stream();
  const char* err = gemm_3xtf32_launch(a.data_ptr<float>(), b.data_ptr<float>(), transpose_b, out.data_ptr<float>(),
                                       M, K, N, splits, scratch.data_ptr(), stream, 0, 0);
  TORCH_CHECK(err == nullptr, "md_accel gemm_3xtf32: ", err);
  return out;
}

}  // namespace
}  // namespace md_accel

// Keep this string identical to md_accel/ops/_gemm_ops.py (SCHEMAS).
TORCH_LIBRARY_FRAGMENT(md_accel, m) { m.def("gemm_3xtf32(Tensor a, Tensor b, bool transpose_b) -> Tensor"); }

TORCH_LIBRARY_IMPL(md_accel, CPU, m) { m.impl("gemm_3xtf32", md_accel::gemm_3xtf32_cpu); }

TORCH_LIBRARY_IMPL(md_accel, CUDA, m) { m.impl("gemm_3xtf32", md_accel::gemm_3xtf32_cuda); }
