// Tensor-core primitives shared by the kernels that use mma.sync (gemm_tf32x3_kernels.cu,
// mlp_hidden_mma.cuh): float32 through the 3xTF32 split, float64 through DMMA.
//
// Every float32 operand x is split as x_hi = tf32(x) (cvt.rna.tf32.f32), x_lo = tf32(x - x_hi),
// and a product is accumulated as A_lo*B_hi + A_hi*B_lo + A_hi*B_hi with mma.sync.m16n8k8 (tf32
// in, float32 accumulate): the dropped A_lo*B_lo term and the roundings leave ~2^-22 relative
// error per product, the level of a float32 FMA chain. The tensor cores add into their
// accumulator with truncation (round toward zero): each truncation cuts off half a unit in the
// last place on average, always toward zero, a bias that adds up over K, over layers and over an
// energy sum (session 19, docs/benchmarks.md: with every float32 product on the tensor cores a
// trained MACE model's energy was 2.4e-5 off float64, 6x the error of plain float32). So
// mma_3xtf32 starts the three mma of one k8 step from zero (the two small terms first: their
// truncations are 2^-11 smaller) and adds the step's partial c to the result with round-to-nearest
// adds, together with the mean of what the truncation of c cut off (plus_rz_half_ulp; added to c
// first: added to a larger result, the half ulp alone would round away): the result's error is then
// unbiased, like a float32 sum's. The radial MLPs' hidden layers (mlp_hidden_mma.cuh) and the opt-in
// fused-radial kernels' last layer (_codegen_fused.py) always run so; gemm_3xtf32_kernel with
// MD_ACCEL_GEMM_UNBIASED=1 (its default scheme, mma_3xtf32_into over a 32-wide k tile, is
// 1.25-1.3x faster and keeps the bias).
//
// Fragment layouts of mma.m16n8k8 .tf32 (PTX ISA, "Matrix Fragments for mma.m16n8k8"):
// groupID g = lane >> 2, threadID_in_group t = lane & 3;
//   A (16x8, row): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)      (row, k)
//   B (8x8, col):  b0 (t, g), b1 (t+4, g)                                   (k, col)
//   C (16x8):      c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)   (row, col)
// and of mma.m8n8k4 .f64 (IEEE float64 products and sums):
//   A (8x4, row): a0 (g, t);  B (4x8, col): b0 (t, g);  C (8x8): c0 (g, 2t), c1 (g, 2t+1)
//
// Under tests/cuda_emu (MD_ACCEL_MMA_HOST_EMU, set by cuda_emu.h) tf32_rna, mma_tf32 and mma_f64 are the
// host versions of tests/cuda_emu/mma_emu.h, written from the same PTX ISA layouts.
#pragma once
#include <cstdint>

#ifdef MD_ACCEL_MMA_HOST_EMU
#include "mma_emu.h"
#else
// sm_80+ instructions; on older architectures the kernels trap (their launchers check the
// compute capability first)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MD_ACCEL_SM80_ASM(...) __trap()
#define MD_ACCEL_SM80_ASM_VOLATILE(...) __trap()
#else
#define MD_ACCEL_SM80_ASM(...) asm(__VA_ARGS__)
#define MD_ACCEL_SM80_ASM_VOLATILE(...) asm volatile(__VA_ARGS__)
#endif

namespace md_accel {
// round to tf32 (nearest, ties away from zero), as the mma operand
__device__ __forceinline__ uint32_t tf32_rna(float x) {
  uint32_t r = 0;
  MD_ACCEL_SM80_ASM("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

// c += a @ b on one m16n8k8 tile (fragments as in the header comment)
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  MD_ACCEL_SM80_ASM("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a @ b on one m8n8k4 float64 tile
__device__ __forceinline__ void mma_f64(double (&c)[2], double a, double b) {
  MD_ACCEL_SM80_ASM("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};"
      : "+d"(c[0]), "+d"(c[1])
      : "d"(a), "d"(b));
}
}  // namespace md_accel
#endif

namespace md_accel {
// x = hi + lo + O(2^-22 |x|). hi is read back as a float32: its low 13 bits are cleared
// explicitly (PTX leaves the tf32 container layout to the implementation; in practice it is a
// float32 with those bits zero already). lo goes to the mma only, which ignores them.
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = tf32_rna(x) & 0xffffe000u;
  lo = tf32_rna(x - __uint_as_float(hi));
}

// The same split in integer operations (the tensor-core forward, md_accel/ops/_codegen_mma.py): hi rounds x to TF32
// as cvt.rna.tf32.f32 does (nearest, ties away from zero), which sm_90 carries out as a sequence of about five
// instructions (ncu, session 63); lo = x - hi goes to the mma whole (it reads lo's TF32 bits, truncating: an error of
// at most 2^-22 |x|, the size of the dropped lo * lo term). For finite x.
__device__ __forceinline__ void split_tf32_int(float x, uint32_t& hi, uint32_t& lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

// c + h, h half a unit in the last place of c with c's sign (the mean of what rounding toward
// zero cut off a result c whose dropped bits are uniform), rounded to nearest: a tie, to even, so
// c or c + 2h, each half the time. One fma: (c's sign and exponent) * 2^-24 + c; it adds nothing to
// a subnormal c, and an odd c at the largest binade's top (|c| = FLT_MAX) may round to inf.
__device__ __forceinline__ float plus_rz_half_ulp(float c) {
  return fmaf(__uint_as_float(__float_as_uint(c) & 0xff800000u), 0x1p-24f, c);
}

// c += a_lo b_hi + a_hi b_lo + a_hi b_hi straight into c (truncating adds, the small terms first)
__device__ __forceinline__ void mma_3xtf32_into(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                                const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
  mma_tf32(c, a_lo, b_hi);
  mma_tf32(c, a_hi, b_lo);
  mma_tf32(c, a_hi, b_hi);
}

// d += a_lo b_hi + a_hi b_lo + a_hi b_hi: the three mma started from zero, the partial and its
// truncation's mean added with round-to-nearest adds (see above)
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                           const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
  float c[4] = {0.f, 0.f, 0.f, 0.f};
  mma_3xtf32_into(c, a_hi, a_lo, b_hi, b_lo);
#pragma unroll
  for (int v = 0; v < 4; ++v) d[v] += plus_rz_half_ulp(c[v]);
}
}  // namespace md_accel
