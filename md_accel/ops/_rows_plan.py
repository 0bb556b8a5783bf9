"""Where the deterministic backward keeps each edge's grad_x contribution without scratch memory: in grad_w.

The specialised backward (``_codegen``) writes every edge's contribution to grad_x as a row, summed per sender
in a fixed order afterwards (bit-reproducible, unlike atomic adds). Those rows, E x in1 elements, are the only
memory the backward needs beyond its inputs and outputs. With "rows in grad_w" they live in columns of grad_w
(E x w elements, w > in1 in the models' 'uvu' products) that are not written yet when the rows are:

* the backward's passes (one or a few in1 blocks each) are launched in runs (``launches``); the rows of a run go
  into the weight columns of paths that later runs compute, and are summed per sender before the next run;
* the last run has no later paths: its rows go into the columns of ``deferred`` paths, whose weight gradients
  the first runs leave unwritten and a last kernel computes once the rows are summed (the cheapest paths: a
  few CG non-zeros each).

A row of in1 block ``key`` is stored as pieces of ``key[1]`` channels, one per component i, each in one path's
weight columns: channel u of piece (key, i) at column ``base + u * stride`` of the edge's grad_w row.
"""
from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

Key = Tuple[int, int, int]  # (offset, mul, width) of an in1 block

# One extra run of the backward costs about what recomputing this fraction of the CG non-zeros costs (a guess;
# docs/performance_notes.md, plan written in session 37).
RECOMPUTE_PER_LAUNCH = 0.1
# Every way of cutting the passes into runs is tried up to this many places to cut (2^n plans); beyond it only
# one run per in1 block and a single run (plans with that many blocks are rare: the models have 1-5).
MAX_EXHAUSTIVE_CUTS = 10


class RowsPlan(NamedTuple):
    launches: List[Tuple[int, int]]  # pass ranges [a, b) launched in turn, each followed by its per-sender sum
    deferred: list  # _Path objects whose weight gradient is computed after the last sum
    slots: Dict[Tuple[Key, int], Tuple[int, int]]  # (in1 block, component) -> (base, stride) in the grad_w row
    launch_of: Dict[Key, int]  # in1 block -> the run that writes (and sums) its rows


def _cuts(blocks_per_pass: Sequence[Sequence[Key]]) -> List[int]:
    """Pass indices where a run may end: no in1 block has passes on both sides."""
    n = len(blocks_per_pass)
    ok = []
    for b in range(1, n + 1):
        before = {k for ks in blocks_per_pass[:b] for k in ks}
        after = {k for ks in blocks_per_pass[b:] for k in ks}
        if not before & after:
            ok.append(b)
    return ok


def _place(keys: Sequence[Key], hosts: list) -> Optional[Dict[Tuple[Key, int], Tuple[int, int]]]:
    """Pieces of ``keys``' rows placed into the weight columns of ``hosts`` (first fit, widest pieces first,
    narrowest hosts first); None if they do not fit."""
    free = {p.idx: 0 for p in hosts}  # channels of each host used so far
    order = sorted(hosts, key=lambda p: (p.mul, p.idx))
    out = {}
    for key, i in sorted(((k, i) for k in keys for i in range(k[2])), key=lambda t: (-t[0][1], t[0][0], t[1])):
        for p in order:
            if p.mul - free[p.idx] >= key[1]:
                out[key, i] = (p.w_off + free[p.idx] * p.w_stride, p.w_stride)
                free[p.idx] += key[1]
                break
        else:
            return None
    return out


def _plan_for_cuts(groups: Sequence[list], blocks: List[List[Key]], ends: Sequence[int],
                   cheap: Sequence) -> Optional[RowsPlan]:
    """The plan whose runs end at pass indices ``ends`` (the last = len(groups)), with the deferred paths added
    cheapest first, each one where the first run whose rows do not fit can use it (not a path of a later run,
    whose columns that run sees anyway); None where even every path deferred is not enough."""
    starts = [0] + list(ends[:-1])
    deferred: list = []
    while True:
        dset = {p.idx for p in deferred}
        slots, launch_of = {}, {}
        for r, (a, b) in enumerate(zip(starts, ends)):
            keys = list(dict.fromkeys(k for ks in blocks[a:b] for k in ks))
            later = [p for g in groups[b:] for p in g]
            placed = _place(keys, [p for p in later if p.idx not in dset] + deferred)
            if placed is None:
                later_idx = {p.idx for p in later}
                extra = next((p for p in cheap if p.idx not in dset and p.idx not in later_idx), None)
                if extra is None:
                    return None
                deferred.append(extra)
                break
            slots.update(placed)
            launch_of.update({k: r for k in keys})
        else:
            return RowsPlan(list(zip(starts, ends)), deferred, slots, launch_of)


def rows_in_grad_w(groups: Sequence[list], live: Sequence) -> Optional[RowsPlan]:
    """The plan for the backward passes ``groups`` (lists of ``_codegen._Path``), or None where rows cannot
    live in grad_w (weight blocks shared by paths, or too few weight columns). Over every way of cutting the
    passes into runs (between in1 blocks; MAX_EXHAUSTIVE_CUTS), the plan of least estimated cost: runs, plus the
    deferred paths' CG non-zeros as a fraction of all (RECOMPUTE_PER_LAUNCH of them cost about one run)."""
    w_keys = [p.w_key for p in live]
    if len(set(w_keys)) != len(w_keys):
        return None
    total = sum(len(p.nz) for p in live)
    cheap = sorted(live, key=lambda p: (len(p.nz), p.idx))
    blocks = [list(dict.fromkeys(p.in1_key for p in g)) for g in groups]
    cuts = _cuts(blocks)[:-1]  # the last pass always ends a run
    best, best_cost = None, None
    every = (1 << len(cuts)) - 1
    for mask in range(every + 1) if len(cuts) <= MAX_EXHAUSTIVE_CUTS else (0, every):
        ends = [c for n, c in enumerate(cuts) if mask >> n & 1] + [len(groups)]
        plan = _plan_for_cuts(groups, blocks, ends, cheap)
        if plan is None:
            continue
        cost = len(plan.launches) + sum(len(p.nz) for p in plan.deferred) / total / RECOMPUTE_PER_LAUNCH
        if best_cost is None or cost < best_cost:
            best, best_cost = plan, cost
    return best
