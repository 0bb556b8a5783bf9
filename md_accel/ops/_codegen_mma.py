"""The float32 forward on the tensor cores (``Tuning.fwd_mma``): ``fwd_kernel_mma``.

Per edge e (sender s) and path p, out[u, (p, k)] += w_p[u] sum_i x_s[u, i] M_e[i, (p, k)] with
M_e[i, (p, k)] = sum_j cg_p[i, j, k] y_e[j]: for the paths that read one in1 block, a product of the sender's
x block (channels x (2 l1 + 1)) and the edge's M (in1 components x the paths' output columns), one
``mma.sync.m16n8k8`` per 16 channels, 8 columns and 8 in1 components, in 3xTF32 (csrc/mma.cuh: float32's
accuracy). The weight, a factor per (path, channel), multiplies the product's tile (C) afterwards, one fma per
element into the pass's accumulators; C starts from zero every edge, so the tensor cores' truncating adds never
reach the sum over edges.

Layout (one warp = 32 channels of one edge slot; passes and edge slots as in the scalar forward):
- columns: each path's 2 l3 + 1 output components, padded to an even count (a lane's two columns of a tile,
  2t and 2t + 1, then belong to one path and share one weight), the paths of one in1 block side by side, padded
  to a multiple of 8 (n-tiles);
- rows (A and C): row g of m-tile m is channel 4 g + 2 m, row g + 8 channel 4 g + 2 m + 1, so that lane
  (g, t) holds channels 4 g .. 4 g + 3 and loads their weights as one float4;
- B (M_e): formed once per edge and warp from y (one component per lane, read by ``__shfl_sync``) and the CG
  values, its non-zero entries dealt out to the lanes in rounds (a generated table per pass: the entry's place
  in shared memory, then (y component, CG value) per term), split into TF32 pairs and stored as the fragments
  the mma reads (one float4 per lane and tile: b0, b1 high, b0, b1 low); its other entries stay zero.

Generated where every path of the plan has a multiplicity that is a multiple of 32 (at most the block), its own
output block, unit weight stride and a weight offset that is a multiple of 4, and y's components fit a warp;
the launcher takes it in float32 when the weights are 16-byte aligned rows of a multiple of 4 (``fwd_mma_ok``),
else the scalar forward. Opt-in: on the H200 it was slower than the scalar forward on every benchmark workload
(nequip_l3 1.34 against 0.76 ms at fwd_mma=7: about 13 % fewer instructions per edge, more waiting on each edge's
loads; docs/benchmarks.md, "Session 63")."""
from __future__ import annotations

import struct as _struct
from typing import List, NamedTuple, Optional, Tuple

MMA_THREADS = 128  # the kernel's block: edge slots of mul / 32 warps each
MAX_TILES = 16  # n-tiles per pass (Tuning.fwd_mma), 8 accumulators per lane each


class _Tile(NamedTuple):
    key: Tuple[int, int, int]  # the in1 block (offset, mul, 2 l1 + 1)
    cols: Tuple[Optional[Tuple[object, int]], ...]  # 8 columns: (path, k) or None (padding)


def supported(live, ymax: int) -> bool:
    """Whether ``fwd_kernel_mma`` is generated for these paths (the module docstring's conditions)."""
    outs = [p.out_key for p in live]
    return (ymax <= 32 and len(set(outs)) == len(outs)
            and all(p.mul % 32 == 0 and p.mul <= MMA_THREADS and p.w_stride == 1 and p.w_off % 4 == 0 for p in live))


def _columns(paths) -> List[Optional[Tuple[object, int]]]:
    cols: List[Optional[Tuple[object, int]]] = []
    for p in paths:
        cols += [(p, k) for k in range(p.d3)] + [None] * (p.d3 % 2)
    return cols + [None] * (-len(cols) % 8)


def passes(live, tiles: int) -> List[List[_Tile]]:
    """The n-tiles of each pass: paths by multiplicity, then by in1 block in plan order, split into the fewest passes
    of at most ``tiles`` n-tiles (a path wider than that alone), as even as the paths allow."""
    out: List[List[_Tile]] = []
    for mul in sorted({p.mul for p in live}, reverse=True):
        order = list(dict.fromkeys(p.in1_key for p in live if p.mul == mul))
        paths = sorted((p for p in live if p.mul == mul), key=lambda p: order.index(p.in1_key))  # by in1 block

        def split(target):
            groups, cur = [], []
            for p in paths:
                if cur and _count(cur + [p]) > target:
                    groups.append(cur)
                    cur = []
                cur.append(p)
            return groups + [cur]

        want = -(-_count(paths) // tiles)
        target = -(-_count(paths) // want)
        while len(split(target)) > want and target < tiles:
            target += 1
        for group in split(target):
            out.append([_Tile(k, tuple(c[8 * n:8 * n + 8])) for k in dict.fromkeys(p.in1_key for p in group)
                        for c in [_columns([p for p in group if p.in1_key == k])] for n in range(len(c) // 8)])
    return out


def _count(paths) -> int:
    """n-tiles of a pass holding these paths."""
    return sum(len(_columns([p for p in paths if p.in1_key == k])) // 8 for k in {p.in1_key for p in paths})


def _f32_bits(hexval: str) -> int:
    return _struct.unpack("<I", _struct.pack("<f", float.fromhex(hexval)))[0]


def _ksteps(key) -> int:
    return -(-key[2] // 8)


def _entries(tiles: List[_Tile], cg_val) -> List[Tuple[int, List[Tuple[int, int]]]]:
    """The non-zero entries of B in a pass: (place of the high part in the warp's staging buffer, [(y component,
    CG value's float32 bits)]); tile n's k-step s is fragment set n * ksteps + s in the buffer's order."""
    out = []
    base = 0
    for tile in tiles:
        for s in range(_ksteps(tile.key)):
            for c, col in enumerate(tile.cols):
                if col is None:
                    continue
                p, k = col
                for r in range(8):
                    i = 8 * s + r
                    terms = [(p.in2_off + j, _f32_bits(cg_val[q])) for (q, ii, j, kk) in p.nz if ii == i and kk == k]
                    if terms:
                        out.append((((base + s) * 32 + 4 * c + r % 4) * 4 + r // 4, terms))
        base += _ksteps(tile.key)
    return out


def _rounds(entries, trash: int) -> Tuple[List[int], List[Tuple[int, int]]]:
    """The staging table of a pass: entries by term count (most first) in rounds of 32 lanes, each lane's record
    [place, y component, CG bits, ...] padded to whole uint4, stored uint4 by uint4 across the lanes (uint4 q of lane l
    at 32 q + l in its round: loads at fixed offsets from the lane's own base); unused lanes write zero to ``trash``.
    Returns (the table's words, per round (the records' length in uint4, the terms))."""
    order = sorted(entries, key=lambda e: -len(e[1]))
    words: List[int] = []
    widths = []
    for r in range(0, len(order), 32):
        chunk = order[r:r + 32]
        terms = max(len(t) for _, t in chunk)
        width = -(-(1 + 2 * terms) // 4)
        widths.append((width, terms))
        recs = []
        for lane in range(32):
            place, ts = chunk[lane] if lane < len(chunk) else (trash, [])
            rec = [place] + [v for t in ts for v in t] + [0, 0] * (terms - len(ts))
            recs.append(rec + [0] * (4 * width - len(rec)))
        words += [v for q in range(width) for rec in recs for v in rec[4 * q:4 * q + 4]]
    return words, widths


def _select(values: List[int]) -> str:
    """The value of lane quad position t (0..3) as a select chain."""
    if len(set(values)) == 1:
        return str(values[0])
    return f"(t == 0 ? {values[0]} : t == 1 ? {values[1]} : t == 2 ? {values[2]} : {values[3]})"


def _prefetch_next(I: str, gi: int, tiles: List[_Tile], S: int) -> Tuple[str, str, str]:
    """The next edge's weight lines of the pass's paths for the warp's channels (lane a: path a's 128 bytes) and its
    y row (the lane after them) asked into L2 (prefetch_l2); the x rows, gathered by sender, are left to L2 as they
    are. Returns (the lanes' offset table, its code before the edge loop, the code in it)."""
    wl = sorted({c[0].w_off for t in tiles for c in t.cols if c})
    if len(wl) >= 32:
        return "", "", ""
    table = f"__device__ const int kMmaPf{gi}[32] = {{{', '.join(str(v) for v in wl + [0] * (32 - len(wl)))}}};\n"
    setup = f"{I}const int pfo = __ldg(kMmaPf{gi} + lane) + cb;  // this lane's weight line in a row\n"
    code = (f"{I}  if (lane <= {len(wl)} && e + {S} < e_end)  // the next edge's weight lines and y row into L2\n"
            f"{I}    prefetch_l2(lane < {len(wl)} ? w + w_index(w_row, e + {S}) * d.w + pfo : y + (e + {S}) * d.in2);\n")
    return table, setup, code


def _pass(gi: int, tiles: List[_Tile], cg_val, ymax: int, prefetch: bool) -> Tuple[str, str, int]:
    """One pass: (device code, its staging table, shared-memory floats it needs); ``prefetch``: the next edge's lines
    asked into L2 (_prefetch_next; prefetch_l2 is in the source)."""
    mul = tiles[0].key[1]
    S = MMA_THREADS // mul
    nb = sum(_ksteps(t.key) for t in tiles)  # fragment sets staged per edge
    buf = nb * 128 + 4  # the warp's staging floats (+ the trash entry)
    words, widths = _rounds(_entries(tiles, cg_val), nb * 128)
    table = (f"__device__ const uint4 kMmaTab{gi}[] = {{"
             + ", ".join("{" + ", ".join(f"{v}u" for v in words[q:q + 4]) + "}" for q in range(0, len(words), 4))
             + "};\n")
    na = len(tiles) * 8
    acc = [f"acc{n}_{m}_{v}" for n in range(len(tiles)) for m in range(2) for v in range(4)]
    keys = list(dict.fromkeys(t.key for t in tiles))  # the pass's in1 blocks, in tile order
    I, I2, I3 = "  ", "    ", "      "
    s = [f"{I}{{  // pass {gi}: {len(tiles)} n-tiles of {mul} channels, {S} edge slot(s)\n"]
    s.append(f"{I2}const int slot = threadIdx.x / {mul}, cb = threadIdx.x % {mul} & ~31;  // edge slot; the warp's "
             f"channels cb ..\n")
    s.append(f"{I2}float* sb = s_mma + (threadIdx.x >> 5) * {buf};  // this warp's B fragments\n")
    s.append(f"{I2}for (int q = lane; q < {buf}; q += 32) sb[q] = 0.f;  // the entries no term reaches stay zero\n")
    s.append(f"{I2}__syncwarp();\n")
    for n in range(len(tiles)):
        s.append(f"{I2}float " + ", ".join(f"{a} = 0.f" for a in acc[8 * n:8 * n + 8]) + ";\n")
    # per tile: the weight offset of the path of the lane's columns 2t, 2t + 1 (padding: 0, its C is zero)
    for n, tile in enumerate(tiles):
        offs = [tile.cols[2 * t][0].w_off if tile.cols[2 * t] else 0 for t in range(4)]
        s.append(f"{I2}const int wo{n} = {_select(offs)};\n")
    s.append(f"{I2}const uint4* tab = kMmaTab{gi} + lane;  // this lane's records\n")
    for key in keys:
        off, _, d1 = key
        for i in range(0, 8 * _ksteps(key), 4):
            if i < d1:
                s.append(f"{I2}const int xq{off}_{i} = min(t + {i}, {d1 - 1});\n")
                if i + 3 >= d1:
                    s.append(f"{I2}const bool xv{off}_{i} = t + {i} < {d1};\n")
    pf_table, pf_setup, pf_code = _prefetch_next(I2, gi, tiles, S) if prefetch else ("", "", "")
    table += pf_table
    s.append(pf_setup)
    s.append(f"{I2}int64_t sn = e_begin + slot < e_end ? __ldg(src + e_begin + slot) : 0;  // the sender, a step ahead\n")
    s.append(f"{I2}if (slot < {S})\n{I2}for (int64_t e = e_begin + slot; e < e_end; e += {S}) {{\n")
    s.append(f"{I3}const float* xr = x + sn * d.in1;\n")
    s.append(f"{I3}if (e + {S} < e_end) sn = __ldg(src + e + {S});\n")
    s.append(f"{I3}const float* wr = w + w_index(w_row, e) * d.w + cb + 4 * g;\n")
    s.append(f"{I3}const float yv = __ldg(y + e * d.in2 + min(lane, {ymax - 1}));  // (lanes past y: never read)\n")
    # every load of the edge first (one memory latency per edge, not one per phase): x as A's elements, the weights
    # (x: from the block's row of channel cb + 4 g at the lane's components, xq: t + i clamped into the block, so that
    # every load stays in the row; xv: whether it is a component, else the element is zero)
    for key in keys:
        off, _, d1 = key
        s.append(f"{I3}const float* xb{off} = xr + {off} + (cb + 4 * g) * {d1};\n")
        for k in range(_ksteps(key)):
            for m in range(2):
                for v in range(4):
                    i = 8 * k + (4 if v >= 2 else 0)
                    ld = f"__ldg(xb{off} + xq{off}_{i} + {(2 * m + (v & 1)) * d1})"
                    val = "0.f" if i >= d1 else f"(xv{off}_{i} ? {ld} : 0.f)" if i + 3 >= d1 else ld
                    s.append(f"{I3}const float x{off}_{k}_{m}_{v} = {val};\n")
    for n in range(len(tiles)):
        s.append(f"{I3}const float4 wv{n} = __ldg(reinterpret_cast<const float4*>(wr + wo{n}));\n")
    s.append(pf_code)
    s.append(f"{I3}__syncwarp();  // the previous edge's fragments have been read\n")
    pos = 0
    for r, (width, terms) in enumerate(widths):
        s.append(f"{I3}{{  // round {r}\n")
        for q in range(width):
            s.append(f"{I3}  const uint4 r{q} = __ldg(tab + {pos + 32 * q});\n")
        flat = [f"r{q}.{c}" for q in range(width) for c in "xyzw"]
        expr = f"__uint_as_float({flat[2]}) * __shfl_sync(0xffffffffu, yv, int({flat[1]}))"
        for tt in range(1, terms):
            expr = f"fmaf(__uint_as_float({flat[2 + 2 * tt]}), __shfl_sync(0xffffffffu, yv, int({flat[1 + 2 * tt]})), " \
                   f"{expr})"
        s.append(f"{I3}  uint32_t hi, lo;\n{I3}  split_tf32_int({expr}, hi, lo);\n")
        s.append(f"{I3}  sb[r0.x] = __uint_as_float(hi);\n{I3}  sb[r0.x + 2] = __uint_as_float(lo);\n{I3}}}\n")
        pos += 32 * width
    s.append(f"{I3}__syncwarp();  // B is staged\n")
    base = 0
    n = 0
    for key in keys:
        off, _, d1 = key
        ks = _ksteps(key)
        s.append(f"{I3}{{  // in1 block at {off} ({d1} components)\n")
        s.append(f"{I3}  uint32_t ah[{ks}][2][4], al[{ks}][2][4];  // A: x of channels cb + 4 g + 2 m (+ 1), "
                 f"components 8 s + t (+ 4)\n")
        for k in range(ks):
            for m in range(2):
                for v in range(4):
                    s.append(f"{I3}  split_tf32_int(x{off}_{k}_{m}_{v}, ah[{k}][{m}][{v}], al[{k}][{m}][{v}]);\n")
        for tile in [t for t in tiles if t.key == key]:
            s.append(f"{I3}  {{  // n-tile {n}\n")
            for k in range(ks):
                s.append(f"{I3}    const float4 b{k} = *reinterpret_cast<const float4*>(sb + ({base + k} * 32 + "
                         f"lane) * 4);\n")
                s.append(f"{I3}    const uint32_t bh{k}[2] = {{__float_as_uint(b{k}.x), __float_as_uint(b{k}.y)}}, "
                         f"bl{k}[2] = {{__float_as_uint(b{k}.z), __float_as_uint(b{k}.w)}};\n")
            for m in range(2):
                s.append(f"{I3}    {{\n{I3}      float c[4] = {{0.f, 0.f, 0.f, 0.f}};\n")
                for k in range(ks):
                    s.append(f"{I3}      mma_3xtf32_into(c, ah[{k}][{m}], al[{k}][{m}], bh{k}, bl{k});\n")
                wx, wy = (f"wv{n}.x", f"wv{n}.y") if m == 0 else (f"wv{n}.z", f"wv{n}.w")
                for v in range(4):
                    a = f"acc{n}_{m}_{v}"
                    s.append(f"{I3}      {a} = fmaf({wx if v < 2 else wy}, c[{v}], {a});\n")
                s.append(f"{I3}    }}\n")
            s.append(f"{I3}  }}\n")
            base += ks
            n += 1
        s.append(f"{I3}}}\n")
    s.append(f"{I2}}}\n")
    red = 0
    if S > 1:
        red = (S - 1) * na * mul
        s.append(f"{I2}__syncthreads();  // every warp is done with its fragments: s_mma takes the slots' sums\n")
        s.append(f"{I2}if (slot > 0) {{\n")
        for c, a in enumerate(acc):
            s.append(f"{I2}  s_mma[((slot - 1) * {na} + {c}) * {mul} + threadIdx.x % {mul}] = {a};\n")
        s.append(f"{I2}}}\n{I2}__syncthreads();\n{I2}if (slot == 0) {{\n{I2}  for (int r = 0; r < {S - 1}; ++r) {{\n")
        for c, a in enumerate(acc):
            s.append(f"{I2}    {a} += s_mma[(r * {na} + {c}) * {mul} + threadIdx.x];\n")
        s.append(f"{I2}  }}\n{I2}}}\n")
    s.append(f"{I2}if (slot == 0) {{  // lane (g, t) holds columns 2t, 2t + 1 of channels cb + 4 g + 0..3\n")
    for n, tile in enumerate(tiles):
        for h in range(2):
            cols = [tile.cols[2 * t + h] for t in range(4)]
            ob = _select([col[0].out_off + col[1] if col else -1 for col in cols])
            od = _select([col[0].d3 if col else 0 for col in cols])
            s.append(f"{I2}  {{\n{I2}    const int ob = {ob}, od = {od};\n{I2}    if (ob >= 0) {{\n")
            for m in range(2):
                for r in range(2):
                    a = f"acc{n}_{m}_{2 * r + h}"
                    o = f"orow[ob + (cb + 4 * g + {2 * m + r}) * od]"
                    s.append(f"{I2}      {o} = d.accumulate ? {o} + {a} : {a};\n")
            s.append(f"{I2}    }}\n{I2}  }}\n")
    s.append(f"{I2}}}\n")
    s.append(f"{I2}__syncthreads();  // s_mma is reused by the next pass\n{I}}}\n")
    return "".join(s), table, max(buf * (MMA_THREADS // 32), red)


def generate(live, cg_val, tiles: int, prefetch: bool) -> str:
    """``fwd_kernel_mma`` and ``fwd_mma_ok`` (the launcher's test), or '' where not ``supported``."""
    ymax = max(p.in2_off + 2 * p.l2 + 1 for p in live)
    if not supported(live, ymax):
        return ""
    parts = [_pass(gi, t, cg_val, ymax, prefetch) for gi, t in enumerate(passes(live, tiles))]
    smem = max(p[2] for p in parts)
    if smem * 4 > 48 * 1024:
        return ""
    body = "".join(p[0] for p in parts)
    tables = "".join(p[1] for p in parts)
    return f"""
// Tuning.fwd_mma: the float32 forward on the tensor cores (md_accel/ops/_codegen_mma.py); block n = receiver,
// {len(parts)} pass(es) over its edges.
{tables}bool fwd_mma_ok(const TPTensors<float>& t, const TPDims& d) {{
  static int major[64] = {{}};  // compute capability per device (0: not asked yet)
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  if (major[dev] == 0) cudaDeviceGetAttribute(&major[dev], cudaDevAttrComputeCapabilityMajor, dev);
  return major[dev] >= 8 && (reinterpret_cast<uintptr_t>(t.w) & 15) == 0 && d.w % 4 == 0;
}}
__global__ void __launch_bounds__({MMA_THREADS}) fwd_kernel_mma(const float* __restrict__ x,
    const float* __restrict__ y, const float* __restrict__ w, float* __restrict__ out,
    const int64_t* __restrict__ src, const int64_t* __restrict__ dst_ptr, const int64_t* __restrict__ w_row,
    TPDims d) {{
  const int64_t n = blockIdx.x;
  const int64_t e_begin = dst_ptr[n], e_end = dst_ptr[n + 1];
  if (d.accumulate && e_begin == e_end) return;
  __shared__ __align__(16) float s_mma[{smem}];  // per warp: B fragments; after a pass: the slots' sums
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  float* orow = out + n * d.out;
{body}  if (!d.accumulate)
    for (int q = threadIdx.x; q < d.out; q += {MMA_THREADS})
      if (!out_covered(q)) orow[q] = 0.f;
}}
"""


LAUNCH = f"""  if constexpr (sizeof(T) == 4) {{
    if (fwd_mma_ok(t, d)) {{
      fwd_kernel_mma<<<unsigned(g.num_nodes), {MMA_THREADS}, 0, stream>>>(t.x, t.y, t.w, t.out, g.src, g.dst_ptr,
                                                                  g.w_row, d);
      return last_error();
    }}
  }}
"""
