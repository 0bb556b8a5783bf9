"""Whether a large step runs from its CUDA graph or launched op by op, decided by timing both.

Up to ``md_accel.step.AUTO_MAX_EDGES`` edges a step is launch-bound and the graph always wins.
Above it, which wins depends on more than the edge count: the graph pads the edges (up to
``GROWTH`` - 1 more) but saves every launch and host wait, so a light model on a slow host gains
(velocity Verlet with the copper MACE in float32 at 32,000 atoms, H200: 17.7 ms captured against
25.4 ms launched, session 48) while a heavier one loses (SevenNet-0 in the same run: 94.8 against
92.3 ms; a MACE-medium shape at 32,000 atoms, H200: 689 against 614 ms, 2026-11-22); the host's
speed enters too. ``StepChoice`` times both on the caller's own steps and keeps the faster per system
size. The trials time the calculator's call alone, and their peak memory is the graph's.
"""
from __future__ import annotations

import statistics
from typing import Dict, Hashable, List, Optional

WAYS = ("graph", "plain")


class StepChoice:
    """Per key (the caller's system size: atom count and edge capacity), the way to run the next
    step: each of ``WAYS`` in turn for one untimed call (a capture, a warm-up) and then ``trials``
    timed ones, then for good the way with the lower median time. ``record`` takes each call's
    time; ``decline`` rules a way out for the key (a failed capture, no memory for it)."""

    def __init__(self, trials: int = 3):
        if trials < 1:
            raise ValueError(f"trials must be at least 1, got {trials}")
        self.trials = int(trials)
        self.chosen: Dict[Hashable, str] = {}
        self.times: Dict[Hashable, Dict[str, List[float]]] = {}
        self._calls: Dict[Hashable, Dict[str, int]] = {}

    def next(self, key: Hashable) -> str:
        """The way to run this call for ``key``."""
        if key in self.chosen:
            return self.chosen[key]
        calls = self._calls.get(key, dict.fromkeys(WAYS, 0))
        for way in WAYS:
            if calls[way] <= self.trials:
                return way
        raise AssertionError("unreachable: record() decides once every way has its trials")

    def record(self, key: Hashable, way: str, seconds: float) -> Optional[str]:
        """The time of a call run ``way`` for ``key`` (the first call of each way is not timed);
        returns the way chosen for good once both ways have their trials, else None."""
        if key in self.chosen:
            return self.chosen[key]
        calls = self._calls.setdefault(key, {w: 0 for w in WAYS})
        calls[way] += 1
        if calls[way] > 1:
            self.times.setdefault(key, {w: [] for w in WAYS})[way].append(float(seconds))
        if all(n > self.trials for n in calls.values()):
            medians = {w: statistics.median(self.times[key][w]) for w in WAYS}
            self.chosen[key] = min(WAYS, key=lambda w: medians[w])
            del self._calls[key]
        return self.chosen.get(key)

    def decline(self, key: Hashable, way: str) -> str:
        """``way`` cannot run for ``key``: the other one is chosen for good (returned)."""
        other = next(w for w in WAYS if w != way)
        self.chosen[key] = other
        self._calls.pop(key, None)
        return other
