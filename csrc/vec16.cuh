// 16-byte vector moves between memory and register arrays (float4 / double2), for kernels that
// stage rows in shared memory. Include after <cuda_runtime.h>; the pointers must be 16-byte aligned.
#pragma once

__device__ __forceinline__ void ld16(float* d, const float* s) {
  const float4 v = *reinterpret_cast<const float4*>(s);
  d[0] = v.x;
  d[1] = v.y;
  d[2] = v.z;
  d[3] = v.w;
}
__device__ __forceinline__ void ld16(double* d, const double* s) {
  const double2 v = *reinterpret_cast<const double2*>(s);
  d[0] = v.x;
  d[1] = v.y;
}
__device__ __forceinline__ void st16(float* d, const float* s) {
  *reinterpret_cast<float4*>(d) = {s[0], s[1], s[2], s[3]};
}
__device__ __forceinline__ void st16(double* d, const double* s) {
  *reinterpret_cast<double2*>(d) = {s[0], s[1]};
}
