// Host versions of csrc/mma.cuh's device primitives for tests/cuda_emu, written from the PTX
// ISA: cvt.rna.tf32.f32 and the warp-collective mma.sync.m16n8k8.row.col.f32.tf32.tf32.f32 with
// its fragment layouts (the tensor cores' accumulation emulated as round toward zero), and
// mma.sync.m8n8k4.row.col.f64 (float64 fused multiply-adds in k order).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace md_accel {
// cvt.rna.tf32.f32: nearest, ties away from zero (on the magnitude bits), low 13 bits zero
inline uint32_t tf32_rna(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
  return u;
}

namespace mma_emu {
struct WarpRegs { uint32_t a[32][4]; uint32_t b[32][2]; double a64[32], b64[32]; };
inline WarpRegs regs[32];  // one per warp of a block (blocks run one after another)
// the mma reads tf32 operands: the low 13 bits are ignored
inline double tf32v(uint32_t u) { return double(__uint_as_float(u & 0xffffe000u)); }
inline float round_toward_zero(double s) {
  float f = float(s);
  if (std::fabs(double(f)) > std::fabs(s)) f = std::nextafter(f, 0.f);
  return f;
}
}  // namespace mma_emu

// g = lane >> 2, t = lane & 3; A: a0 (g, t) a1 (g+8, t) a2 (g, t+4) a3 (g+8, t+4);
// B: b0 (k=t, n=g) b1 (k=t+4, n=g); C: c0 (g, 2t) c1 (g, 2t+1) c2 (g+8, 2t) c3 (g+8, 2t+1)
inline void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  auto& w = emu::warp();
  const int lane = int(threadIdx.x & 31);
  auto& r = mma_emu::regs[threadIdx.x / 32];
  for (int i = 0; i < 4; ++i) r.a[lane][i] = a[i];
  r.b[lane][0] = b[0];
  r.b[lane][1] = b[1];
  w.bar.arrive_and_wait();
  const int g = lane >> 2, t = lane & 3;
  float d[4];
  for (int v = 0; v < 4; ++v) {
    const int row = g + (v >= 2 ? 8 : 0), col = 2 * t + (v & 1);
    double s = 0.0;
    for (int k = 0; k < 8; ++k) {
      const double av = mma_emu::tf32v(r.a[(row % 8) * 4 + k % 4][(row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)]);
      const double bv = mma_emu::tf32v(r.b[col * 4 + k % 4][k >= 4 ? 1 : 0]);
      s += av * bv;
    }
    d[v] = mma_emu::round_toward_zero(double(c[v]) + s);
  }
  w.bar.arrive_and_wait();
  for (int v = 0; v < 4; ++v) c[v] = d[v];
}

// g = lane >> 2, t = lane & 3; A: a0 (g, t); B: b0 (k=t, n=g); C: c0 (g, 2t) c1 (g, 2t+1)
inline void mma_f64(double (&c)[2], double a, double b) {
  auto& w = emu::warp();
  const int lane = int(threadIdx.x & 31);
  auto& r = mma_emu::regs[threadIdx.x / 32];
  r.a64[lane] = a;
  r.b64[lane] = b;
  w.bar.arrive_and_wait();
  const int g = lane >> 2, t = lane & 3;
  double d[2];
  for (int v = 0; v < 2; ++v) {
    const int col = 2 * t + v;
    double s = c[v];
    for (int k = 0; k < 4; ++k) s = std::fma(r.a64[g * 4 + k], r.b64[col * 4 + k], s);
    d[v] = s;
  }
  w.bar.arrive_and_wait();
  c[0] = d[0];
  c[1] = d[1];
}
}  // namespace md_accel
