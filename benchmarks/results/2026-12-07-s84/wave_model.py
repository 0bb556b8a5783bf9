"""A model of part 1's row reads under Tuning.wave (session 84): receivers' blocks, in index order, on C resident
slots (132 SMs x 3), one time unit per edge; a sender's row hits L2 if it was read within the last W edge reads
GPU-wide (tools/l2_gather_probe.cu: a row survives ~1,400 edges of part 1's traffic). Prints the rows' miss rate for
the edges in order, for the start from dst_ptr[n] (span scaled), and for the start from the edges done before the
block starts (what the kernels use). python3 wave_model.py"""
import heapq

import numpy as np

N, E, C, W = 4000, 312000, 396, 1400
rng = np.random.default_rng(0)
half_src, half_dst = rng.integers(0, N, E // 2), rng.integers(0, N, E // 2)
src, dst = np.concatenate([half_src, half_dst]), np.concatenate([half_dst, half_src])
order = np.lexsort((src, dst))
src, dst = src[order], dst[order]
ptr = np.searchsorted(dst, np.arange(N + 1))


def miss_rate(start) -> float:
    """``start(n, t0, done)``: the phase in [0, 1) of the sender block n starts at (None: in order), from its
    start time t0 or the edges of the blocks ended by then."""
    slots = [(0.0, i, 0) for i in range(C)]
    heapq.heapify(slots)
    reads, done = [], 0
    for n in range(N):
        t0, slot, ended = heapq.heappop(slots)
        done += ended
        b, e = ptr[n], ptr[n + 1]
        s = src[b:e]
        phase = start(n, t0, done)
        if phase is not None and e > b:
            rot = int(np.searchsorted(s, int(phase * N)))
            s = np.concatenate([s[rot:], s[:rot]])
        reads += [(t0 + j, v) for j, v in enumerate(s)]
        heapq.heappush(slots, (t0 + (e - b), slot, e - b))
    reads.sort()
    last, misses = np.full(N, -10 ** 9), 0
    for k, (_, v) in enumerate(reads):
        misses += k - last[v] > W
        last[v] = k
    return misses / len(reads)


span = C * E / N
print("in order", round(miss_rate(lambda n, t0, done: None), 3))
for scale in (0.67, 1.0, 1.09, 1.33):
    print(f"from dst_ptr[n], span x {scale}", round(miss_rate(lambda n, t0, done: (ptr[n] / (span * scale)) % 1.0), 3))
print("from the start time (t0 x C edges)", round(miss_rate(lambda n, t0, done: (t0 * C / span) % 1.0), 3))
for scale in (0.67, 1.0, 1.09, 1.33):
    print(f"from the ended blocks' edges, span x {scale}",
          round(miss_rate(lambda n, t0, done: (done / (span * scale)) % 1.0), 3))
