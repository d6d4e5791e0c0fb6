"""The outcome of :func:`panda.optimal.solve_optimal`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class OptimalResult:
    """Outcome of :func:`solve_optimal`.

    Attributes
    ----------
    matrix
        ``(K, M)`` exactly eps-mDP, row-stochastic matrix (``None`` only if no round finished).
    upper_bound
        ``sum(cost * matrix)``: the objective of ``matrix`` (``inf`` without one).
    lower_bound
        A proven lower bound on the optimum of the LP with the floor ``eta`` (``-inf`` if none).
    lower_bound_no_floor
        A proven lower bound on the optimum of the LP without the floor (``eta = 0``).
    gap
        ``(upper_bound - lower_bound) / upper_bound``.
    solved
        True when ``gap`` met the requested target.
    reason
        Why the loop stopped ("gap reached", "no violated row", "time limit", "HiGHS ...").
    rounds
        One dict per round: rows, HiGHS status and time, relaxation objective, bounds, rows added.
    info
        Repair facts of the returned matrix, separation tolerance, batch size, total time.
    """

    matrix: np.ndarray | None
    upper_bound: float
    lower_bound: float
    lower_bound_no_floor: float
    gap: float
    solved: bool
    reason: str
    rounds: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)
