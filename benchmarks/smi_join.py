"""The GPU's clocks, power and clock-event reasons while each cell of ``kernels.py`` (or each step of
``model_step.py``) was timed: the records' ``timed`` windows (local wall time, ``common.local_stamp``) matched with an
``nvidia-smi`` CSV log written on the same machine during the run. It answers whether a cell that ran slow in one
process ran at a lower SM clock than in another, and what energy each implementation spends per call.

On the GPU machine, beside the run (``SMI_LOG=100 source tools/gpu_call_env.sh`` starts such a log in ``$R/smi.csv``,
``smi_stop`` ends it):

    q=timestamp,clocks.sm,clocks.mem,power.draw,power.draw.instant,temperature.gpu,clocks_event_reasons.active
    nvidia-smi --query-gpu=$q --format=csv,nounits -lms 100 > smi.csv &

    python benchmarks/smi_join.py RUN/kernels.json smi.csv [--impls md_accel,cueq] [--passes dbwd]
    python benchmarks/smi_join.py RUN/model_step.json smi.csv [--impls md_accel:FILE.mdx+graph]

One line per timed record: its median, then over the log's samples inside its window the SM clock (min / median /
max, MHz), the peak power (W), the peak temperature, the event reasons seen (hex masks OR-ed; 0x0 none; 0x4 is the
software power cap) and the energy per call, the mean power times the median (J). Where the GPU runs at its power cap
(session 44, H200: 700 W), that energy decides a kernel's sustained time. The mean is over ``power.draw.instant``
where the log has it; else over the ``power.draw`` samples at least AVERAGE_S after the window opened, since on
Ampere and newer GPUs ``power.draw`` is the average of the last second and its first second in a window still holds
what ran before (None when the window is too short for that).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
from typing import Dict, List, Optional, Sequence

STAMP = "%Y/%m/%d %H:%M:%S.%f"
AVERAGE_S = 1.0  # power.draw: the board's mean power over the last second (Ampere and newer)


def _time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text.strip(), STAMP)


def _number(text: str) -> Optional[float]:
    """A CSV value with or without its unit ("1980 MHz" or "1980"); None for "[N/A]" and the like."""
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def read_smi(path: str) -> List[Dict]:
    """The samples of an nvidia-smi ``--format=csv`` log (units or ``nounits``), keyed by the query's field names
    (the header's names without their units)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    names = [h.strip().split(" [")[0] for h in rows[0]]
    samples = []
    for row in rows[1:]:
        if len(row) != len(names):
            continue
        rec = dict(zip(names, (v.strip() for v in row)))
        try:
            rec["time"] = _time(rec["timestamp"])
        except (KeyError, ValueError):
            continue
        samples.append(rec)
    return samples


def _field(sample: Dict, *names: str) -> Optional[str]:
    for n in names:
        if n in sample:
            return sample[n]
    return None


def _values(samples: Sequence[Dict], *names: str) -> List[float]:
    """The samples' numeric values of the first of ``names`` each has (missing and "[N/A]" left out)."""
    return [v for v in (_number(_field(s, *names) or "") for s in samples) if v is not None]


def window_summary(samples: Sequence[Dict], start: datetime.datetime, end: datetime.datetime) -> Dict:
    """The samples inside [start, end]: their count, SM clock min / median / max, peak power and temperature, the
    event reasons' masks OR-ed together, and the mean power of the window's own work (module docstring)."""
    inside = [s for s in samples if start <= s["time"] <= end]
    clocks = _values(inside, "clocks.current.sm", "clocks.sm")
    power = _values(inside, "power.draw")
    own_power = _values(inside, "power.draw.instant")
    if not own_power:  # the 1 s averages that began inside the window
        own_power = _values([s for s in inside if (s["time"] - start).total_seconds() >= AVERAGE_S], "power.draw")
    temp = _values(inside, "temperature.gpu")
    reasons = 0
    for s in inside:
        r = _field(s, "clocks_event_reasons.active", "clocks_throttle_reasons.active")
        try:
            reasons |= int(r, 16) if r and r.lower().startswith("0x") else 0
        except ValueError:  # a row cut short while the log was written
            pass
    return {"samples": len(inside),
            "sm_mhz": (min(clocks), statistics.median(clocks), max(clocks)) if clocks else None,
            "power_w": max(power) if power else None,
            "mean_power_w": statistics.fmean(own_power) if own_power else None,
            "temp_c": max(temp) if temp else None, "reasons": reasons}


KERNEL_KEYS = ("workload", "dtype", "impl", "pass")  # a kernels.py cell
STEP_KEYS = ("model", "atoms", "backend")  # a model_step.py step (the dtype is the run's)


def join(records: Sequence[Dict], samples: Sequence[Dict], impls: Optional[Sequence[str]] = None,
         passes: Optional[Sequence[str]] = None) -> List[Dict]:
    """Each timed record (with ``timed`` and ``median_ms``), in the file's order, with its window's summary and
    energy per call (``joules``: mean power x median time; None without power samples). ``impls`` selects
    kernels.py's implementations or model_step.py's backends, ``passes`` kernels.py's passes."""
    out = []
    for r in records:
        if "timed" not in r or "median_ms" not in r:
            continue
        keys = KERNEL_KEYS if "impl" in r else STEP_KEYS
        if (impls and r[keys[2]] not in impls) or (passes and r.get("pass") not in passes):
            continue
        summary = window_summary(samples, _time(r["timed"][0]), _time(r["timed"][1]))
        watts = summary["mean_power_w"]
        out.append({**{k: r[k] for k in keys + ("median_ms",)}, **summary,
                    "joules": None if watts is None else watts * r["median_ms"] * 1e-3})
    return out


def line(j: Dict) -> str:
    clocks = "no samples" if j["sm_mhz"] is None else "SM {:.0f} / {:.0f} / {:.0f} MHz".format(*j["sm_mhz"])
    extra = "".join([f", {j['power_w']:.0f} W" if j["power_w"] is not None else "",
                     f", {j['temp_c']:.0f} C" if j["temp_c"] is not None else "",
                     f", {j['joules']:.2f} J per call" if j["joules"] is not None else ""])
    if "impl" in j:
        cell = f"{j['workload']:16s} {j['dtype']:8s} {j['impl']:16s} {j['pass']:8s}"
    else:
        cell = f"{j['model']:16s} {j['atoms']:>8} atoms  {j['backend']:32s}"
    return f"{cell} {j['median_ms']:9.3f} ms  {clocks}{extra}, reasons {j['reasons']:#x} ({j['samples']} samples)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernels_json", help="kernels.py's or model_step.py's JSON")
    ap.add_argument("smi_csv")
    ap.add_argument("--impls", default="", help="comma-separated implementations (model_step.py: backends); all")
    ap.add_argument("--passes", default="", help="comma-separated; default all")
    args = ap.parse_args(argv)
    with open(args.kernels_json) as f:
        records = json.load(f)["results"]
    joined = join(records, read_smi(args.smi_csv), [i for i in args.impls.split(",") if i],
                  [p for p in args.passes.split(",") if p])
    for j in joined:
        print(line(j))


if __name__ == "__main__":
    main()
