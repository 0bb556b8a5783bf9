// Deterministic per-sender grad_x sums by integer reductions (TPDims::fixed_gx), included by the generated kernel
// libraries (md_accel/ops/_codegen.py).
//
// Each grad_x term v of an edge is added into its sender's accumulator as a fixed-point number in three int64 limbs,
// top * 2^-22 + mid * 2^-64 + low * 2^-106, each limb of magnitude at most 2^42. Integer sums do not depend on their
// order, so the result is the same bits whatever order the edges' threads run in, without writing a row per edge and
// summing the rows again (the default deterministic path). The one rounding of a term is that of its low limb (to
// 2^-106); a float64 sum in a fixed order rounds at every add, so this is the closer sum wherever the largest term
// exceeds 2^-53.
//
// The window holds |v| < 2^20; the host uses this mode only for graphs of at most kFixedGxMaxEdges = 2^21 edges, so
// each limb's sum fits an int64 whatever the degrees. A larger term goes, with its sender flagged, into a second set
// of limbs at 2^73 times the scale (top * 2^51 + mid * 2^9 + low * 2^-33: exact for 2^20 <= |v| < 2^93, whose last
// bit is at least 2^-32), and a term beyond that or not finite into a float64 sum (atomicAdd: infinities and NaN give
// the same result in any order; only two or more finite terms of 2^93 or more at one element would be summed in the
// threads' order). The carry kernel adds the three in a fixed order for flagged senders.
//
// Workspace (the launcher's work pointer, fixed_gx_words 8-byte words, zeroed by the host): limbs [N * in1 * 3],
// coarse limbs [N * in1 * 3], float64 sums [N * in1], sender flags [N].
#pragma once
#include <cstdint>

#include "tp_spec_abi.h"

namespace md_accel {

struct FixedGxLayout {
  long long* limbs;
  long long* coarse;
  double* beyond;
  long long* flags;
  __device__ FixedGxLayout(void* work, int64_t nodes, int64_t in1) {
    limbs = static_cast<long long*>(work);
    coarse = limbs + nodes * in1 * 3;
    beyond = reinterpret_cast<double*>(coarse + nodes * in1 * 3);
    flags = reinterpret_cast<long long*>(beyond + nodes * in1);
  }
};

// v (|v| < 2^42 / inv) into the limbs p[0..2] at scales 1 / inv, 2^-42 / inv, 2^-84 / inv (inv a power of two):
// truncations and exact subtractions, the low limb rounded. Unsigned adds of two's-complement values give the same
// bits as signed ones, and nvcc issues reductions (RED) for adds whose result is unused.
__device__ __forceinline__ void fixed_gx_limbs(long long* p, double v, double inv) {
  const double top = trunc(v * inv);
  const double r1 = fma(-top, 1.0 / inv, v);                  // exact: v's bits below the top limb's
  const double mid = trunc(r1 * (inv * 0x1.0p42));
  const double r2 = fma(-mid, 0x1.0p-42 / inv, r1);           // exact
  const double low = rint(r2 * (inv * 0x1.0p84));
  if (top != 0.0) atomicAdd(reinterpret_cast<unsigned long long*>(p), (unsigned long long)(long long)top);
  if (mid != 0.0) atomicAdd(reinterpret_cast<unsigned long long*>(p + 1), (unsigned long long)(long long)mid);
  if (low != 0.0) atomicAdd(reinterpret_cast<unsigned long long*>(p + 2), (unsigned long long)(long long)low);
}

// Term v of sender s's column c into the sums. The graph's N is num_parts / split (the per-edge kernels' arguments):
// only a term outside the window needs it.
template <typename T>
__device__ __forceinline__ void fixed_gx_add(void* work, int64_t num_parts, int split, int in1, int64_t s, int c,
                                             T term) {
  const double v = double(term);
  const int64_t i = s * in1 + c;
  if (fabs(v) < 0x1.0p20) {  // false for NaN
    fixed_gx_limbs(static_cast<long long*>(work) + i * 3, v, 0x1.0p22);
    return;
  }
  const FixedGxLayout l(work, num_parts / split, in1);
  if (fabs(v) < 0x1.0p93)
    fixed_gx_limbs(l.coarse + i * 3, v, 0x1.0p-51);
  else
    atomicAdd(l.beyond + i, v);
  atomicOr(reinterpret_cast<unsigned long long*>(l.flags + s), 1ull);
}

// The sum of limbs (t, m, l) at scales 1 / inv, 2^-42 / inv, 2^-84 / inv as float64: carried so that the two lower
// limbs lie in [0, 2^42), then as sign and magnitude, so that the rounding sees no cancellation.
__device__ __forceinline__ double fixed_gx_value(const long long* p, double inv) {
  constexpr long long B = 1ll << 42;
  long long t = p[0], m = p[1], l = p[2];
  long long c = l >> 42;  // arithmetic shift: floor division
  l -= c * B;
  m += c;
  c = m >> 42;
  m -= c * B;
  t += c;
  const bool neg = t < 0;
  if (neg) {  // -(t B^2 + m B + l) = (-t - 1) B^2 + (B - 1 - m) B + (B - l), carried
    t = -t - 1;
    m = B - 1 - m;
    l = B - l;
    if (l == B) { l = 0; m += 1; }
    if (m == B) { m = 0; t += 1; }
  }
  const double r = (double(t) + (double(m) * 0x1.0p-42 + double(l) * 0x1.0p-84)) / inv;
  return neg ? -r : r;
}

// grad_x[n] from the sums, a block per sender n: the window's limbs, and for a flagged sender the coarse limbs and
// the float64 sum added in that order.
template <typename T>
__global__ void __launch_bounds__(256) fixed_gx_carry_kernel(void* work, int64_t nodes, int in1, T* __restrict__ gx) {
  const FixedGxLayout l(work, nodes, in1);
  const int64_t n = blockIdx.x;
  const bool flagged = l.flags[n] != 0;
  for (int c = threadIdx.x; c < in1; c += blockDim.x) {
    const int64_t i = n * in1 + c;
    double s = fixed_gx_value(l.limbs + i * 3, 0x1.0p22);
    if (flagged) s = s + fixed_gx_value(l.coarse + i * 3, 0x1.0p-51) + l.beyond[i];
    gx[i] = T(s);
  }
}

}  // namespace md_accel
