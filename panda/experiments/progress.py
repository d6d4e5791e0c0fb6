"""Progress lines of a running sweep: rows and instances done, elapsed time, an estimate of the time left."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from panda.experiments.results import row_key


def _hms(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{seconds:.0f}s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class _Progress:
    """Stderr lines with rows done and an estimate of the time left.

    Each remaining row is costed at its method's (and preset's) observed seconds per record (K) so
    far, or at the median method's rate until its method has finished once; the estimate is the
    elapsed time scaled by remaining cost over finished cost, so parallel workers are accounted for.
    Rough by nature: the first row of a slow method changes it a lot.
    """

    def __init__(self, stream: TextIO | None, todo: Sequence[tuple[tuple[str, ...], int]], n_units: int) -> None:
        self.stream = stream
        self.remaining = {key: float(k) for key, k in todo}
        self.n_rows = len(todo)
        self.n_done = 0
        self.n_units = n_units
        self.units_done = 0
        self.t0 = time.perf_counter()
        self.spent: dict[tuple[str, str], float] = {}  # (method, preset) -> wall seconds
        self.size: dict[tuple[str, str], float] = {}  # (method, preset) -> sum of K

    def say(self, text: str) -> None:
        if self.stream is not None:
            print(text, file=self.stream, flush=True)

    def _left(self, elapsed: float) -> float:
        done = sum(self.spent.values())
        if done <= 0 or not self.size:
            return float("nan")
        rates = sorted(self.spent[mp] / self.size[mp] for mp in self.size if self.size[mp] > 0)
        overall = rates[len(rates) // 2]  # a method not seen yet: the median method's rate
        cost = 0.0
        for key, k in self.remaining.items():
            mp = (key[5], key[2])
            rate = self.spent[mp] / self.size[mp] if mp in self.size and self.size[mp] > 0 else overall
            cost += rate * k
        return elapsed * cost / done

    def row(self, row: Mapping[str, Any]) -> None:
        key = row_key(row)
        k = self.remaining.pop(key, None)
        self.n_done += 1
        wall = row.get("wall_time_s")
        if k is not None and isinstance(wall, float) and math.isfinite(wall):
            mp = (key[5], key[2])
            self.spent[mp] = self.spent.get(mp, 0.0) + wall
            self.size[mp] = self.size.get(mp, 0.0) + k
        elapsed = time.perf_counter() - self.t0
        left = self._left(elapsed) if self.remaining else 0.0
        eta = f"about {_hms(left)} left" if math.isfinite(left) else "time left unknown"
        method = str(row["method"]) + (f"/{row['preset']}" if row.get("preset") else "")
        t = row.get("time_s")
        t_text = f"{t:.2f} s" if isinstance(t, float) and math.isfinite(t) else "n/a"
        self.say(
            f"[experiment] {self.n_done}/{self.n_rows} rows, {self.units_done}/{self.n_units} instances, "
            f"{_hms(elapsed)} elapsed, {eta} | {row['network']} K={row['K']} rep {row['repetition']} "
            f"{method}: {row['status']} ({t_text})"
        )
