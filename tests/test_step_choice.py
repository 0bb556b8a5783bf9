"""``StepChoice`` (graph or plain for a large step, by timing both) and the Calculator's use of it: the
protocol on synthetic times, then a Calculator whose graphed branch (``VerletGraphStep`` run eagerly on the
CPU) is chosen or ruled out by its own timings, with the same results as the plain Calculator throughout."""
import copy

import numpy as np
import pytest
import torch
from ase.build import bulk

from md_accel import calculator as calculator_module
from md_accel.calculator import Calculator
from md_accel.step import capacity
from md_accel.step_choice import StepChoice
from md_accel.verlet_step import VerletGraphStep


def _drive(choice, key, seconds):
    """Calls until ``choice`` decides for ``key``: each call runs the way it is told and takes
    seconds[way] (a list consumed in order); returns the ways run and the decision."""
    ways = []
    while key not in choice.chosen:
        way = choice.next(key)
        ways.append(way)
        choice.record(key, way, seconds[way].pop(0))
    return ways, choice.chosen[key]


@pytest.mark.parametrize("graph_s, plain_s, expected", [
    ([9.0, 1.0, 1.0, 5.0], [0.1, 2.0, 2.0, 0.5], "graph"),  # untimed first calls: a slow capture, a fast warm-up
    ([0.1, 2.0, 3.0, 2.0], [9.0, 1.0, 1.5, 9.0], "plain"),  # medians 2.0 against 1.5: one outlier does not decide
])
def test_lower_median_of_timed_calls_wins(graph_s, plain_s, expected):
    choice = StepChoice(trials=3)
    ways, chosen = _drive(choice, "k", {"graph": list(graph_s), "plain": list(plain_s)})
    assert ways == ["graph"] * 4 + ["plain"] * 4 and chosen == expected
    assert choice.times["k"] == {"graph": graph_s[1:], "plain": plain_s[1:]}
    assert [choice.next("k") for _ in range(3)] == [expected] * 3  # kept for good
    assert choice.record("k", "graph", 100.0) == expected and choice.times["k"]["graph"] == graph_s[1:]


def test_keys_decided_apart_and_decline():
    choice = StepChoice(trials=1)
    assert _drive(choice, "small", {"graph": [1, 1], "plain": [1, 2]})[1] == "graph"
    assert choice.next("large") == "graph"  # a new key starts its own trials
    choice.record("large", "graph", 1.0)
    assert choice.decline("large", "graph") == "plain" and choice.next("large") == "plain"
    assert choice.chosen == {"small": "graph", "large": "plain"}
    with pytest.raises(ValueError, match="trials"):
        StepChoice(trials=0)


def _auto_calculator(potential, monkeypatch, atoms, trials=2):
    """(a Calculator set up as the default one on CUDA, with AUTO_MAX_EDGES just under ``atoms``' edge count:
    the eager step declining past it, a StepChoice; the plain Calculator; the choice's key for ``atoms``)."""
    plain = Calculator(copy.deepcopy(potential), device="cpu")
    plain.get_potential_energy(atoms)
    edges = plain.stats["edges"]
    monkeypatch.setattr(calculator_module, "AUTO_MAX_EDGES", edges - 1)
    stepped = Calculator(copy.deepcopy(potential), device="cpu")
    assert stepped.step is None and stepped.step_choice is None  # no graph off CUDA: attach the eager step
    stepped.step = VerletGraphStep(stepped.model, torch.device("cpu"), max_edges=edges - 1)
    stepped.step_choice = StepChoice(trials=trials)
    return stepped, plain, (len(atoms), capacity(edges))


def _calls(stepped, plain, atoms, n):
    """``n`` calls on jiggled copies of ``atoms``, each checked against ``plain``; whether the step held a
    layout (a graph) after each."""
    held = []
    rng = np.random.default_rng(0)
    for _ in range(n):
        a = atoms.copy()
        a.positions += rng.normal(scale=0.02, size=a.positions.shape)
        stepped.reset()
        e, f = stepped.get_potential_energy(a), stepped.get_forces(a)
        assert e == pytest.approx(plain.get_potential_energy(a), rel=1e-12)
        assert np.abs(f - plain.get_forces(a)).max() < 1e-12
        held.append(stepped.step.layout is not None)
    return held


def test_calculator_times_both_ways_then_keeps_one(lj_potential, monkeypatch):
    """Past AUTO_MAX_EDGES (lowered here) the Calculator's first call on a size counts the edges and runs plain
    (the graph declined, as without a choice); then it asks its StepChoice per (atoms, edge capacity): the
    graphed branch for its trials, past the limit, then the plain one, which first releases the step's buffers;
    afterwards only the chosen way runs (the step holds a layout exactly when it is the graph). The results equal
    the plain Calculator's in every call."""
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    stepped, plain, key = _auto_calculator(lj_potential, monkeypatch, atoms)
    held = _calls(stepped, plain, atoms, 10)
    # call 0: declined; calls 1-3 the graph's trials, 4-6 plain's
    assert held[:7] == [False] + [True] * 3 + [False] * 3
    chosen = stepped.step_choice.chosen[key]
    assert held[7:] == [chosen == "graph"] * 3
    assert {w: len(t) for w, t in stepped.step_choice.times[key].items()} == {"graph": 2, "plain": 2}


def test_calculator_graph_out_of_memory_in_a_trial(lj_potential, monkeypatch):
    """A graphed trial that runs out of memory rules the graph out for that size: the call runs plain, with the
    same results, and so do the later ones; a forced graph (no trial) raises as before."""
    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    stepped, plain, key = _auto_calculator(lj_potential, monkeypatch, atoms)
    graphed = stepped._graphed

    def no_memory_past_the_limit(a, unlimited=False):
        if unlimited:
            raise torch.OutOfMemoryError("out of memory (test)")
        return graphed(a, unlimited)

    stepped._graphed = no_memory_past_the_limit
    assert _calls(stepped, plain, atoms, 4) == [False] * 4
    assert stepped.step_choice.chosen == {key: "plain"} and key not in stepped.step_choice.times
    forced = Calculator(copy.deepcopy(lj_potential), device="cpu")
    forced.step = VerletGraphStep(forced.model, torch.device("cpu"))
    forced._graphed = lambda a, unlimited=False: (_ for _ in ()).throw(torch.OutOfMemoryError("oom"))
    with pytest.raises(torch.OutOfMemoryError):
        forced.get_potential_energy(atoms)
