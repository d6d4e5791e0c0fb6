"""The one interface every mechanism shares: a perturbation matrix over records x outputs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from panda.checks import check_epsilon
from panda.instance import Instance

__all__ = ["MechanismResult", "check_epsilon", "expected_loss_m"]


def expected_loss_m(instance: Instance, matrix: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Return the expected utility loss in metres, ``sum_x p_x sum_y cost[x, y] P[x, y]`` (``p``: the prior)."""
    p = instance.prior if weights is None else np.asarray(weights, dtype=float)
    return float(np.einsum("x,xy,xy->", p, instance.cost_m, matrix))


@dataclass(frozen=True)
class MechanismResult:
    """A mechanism built for one instance.

    Attributes
    ----------
    name
        Short method name ("em", "em-br", "laplace", "lp", "lp-ca", "lp-bd", "lp-em", "panda-e", ...).
    epsilon_per_km
        The privacy budget the mechanism was built for, 1/km.
    matrix
        ``(K, M)`` row-stochastic ``Pr[y | x]`` over the instance's records and outputs, or ``None``
        when the mechanism could not be built (see ``status``).
    status
        ``"solved"``, or why not (``"unsolved: time limit after 1800.0 s"``, ``"failed: ..."``).
    build_time_s
        Wall time to build the matrix (everything that costs time), seconds.
    loss_m
        Expected utility loss under the instance's prior, metres (``nan`` when unsolved).
    details
        Method-specific facts (LP sizes, gap, estimation error, what was clipped ...).
    """

    name: str
    epsilon_per_km: float
    matrix: np.ndarray | None
    status: str
    build_time_s: float
    loss_m: float
    details: dict = field(default_factory=dict)

    @property
    def solved(self) -> bool:
        """True when ``matrix`` is available (statuses start with ``"solved"``; LP+BD qualifies its own)."""
        return self.matrix is not None and self.status.startswith("solved")

    def sample(self, records: np.ndarray, *, rng: np.random.Generator) -> np.ndarray:
        """Sample one output (a position in Y) for each record position in ``records``."""
        if self.matrix is None:
            msg = f"The mechanism {self.name!r} has no matrix to sample from ({self.status})."
            raise ValueError(msg)
        rows = self.matrix[np.asarray(records)]
        cdf = np.cumsum(rows, axis=1)
        u = rng.random(rows.shape[0]) * cdf[:, -1]
        return (cdf < u[:, None]).sum(axis=1)
