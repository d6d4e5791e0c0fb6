"""The exponential mechanism (EM) and its Bayesian remapping (EM+BR).

EM (Chatzikokolakis et al. 2015, as a baseline in the PAnDA paper 4.3)::

    Pr[y | x] = exp(-eps d(x, y) / 2) / Z(x),     Z(x) = sum_{y in Y} exp(-eps d(x, y) / 2)

Why ``/ 2``: for records ``x, x'`` and an output ``y`` the triangle inequality gives
``exp(-eps d(x, y) / 2) <= exp(eps d(x, x') / 2) exp(-eps d(x', y) / 2)`` for the numerator, and the
same bound term by term for the normaliser, ``Z(x') <= exp(eps d(x, x') / 2) Z(x)``. The ratio
``Pr[y | x] / Pr[y | x']`` is the product of the two, at most ``exp(eps d(x, x'))``: eps-mDP. Without
the ``/ 2`` a normalised EM is only 2 eps-mDP in general (the paper's text omits it; its code has it).
It needs ``d`` to be a metric, which both of the project's metrics are (haversine; the symmetrised
road distance).

EM+BR (Chatzikokolakis et al. 2017): the server, knowing the prior ``p``, replaces EM's output ``y``
by ``r(y) = argmin_{y'} sum_x p_x Pr[y | x] cost[x, y']``, the output with the smallest expected
utility cost under the posterior ``Pr[x | y]``. The matrix is EM followed by this deterministic map:
post-processing, so still eps-mDP, and ``r(y) = y`` is always a candidate, so its loss is never
above EM's (ties keep ``y``).
"""

from __future__ import annotations

import time

import numpy as np
from scipy.special import logsumexp

from panda.instance import Instance
from panda.mechanisms._common import finish, output_distances_km
from panda.mechanisms.base import MechanismResult, check_epsilon

__all__ = ["build_em", "build_em_br", "em_matrix", "bayesian_remap"]


def em_matrix(d_km: np.ndarray, epsilon_per_km: float) -> np.ndarray:
    """``(K, M)`` EM matrix ``exp(-eps d / 2)``, rows normalised in log space (no underflow to 0 rows)."""
    logits = -0.5 * float(epsilon_per_km) * np.asarray(d_km, dtype=float)
    log_p = logits - logsumexp(logits, axis=1, keepdims=True)
    return np.exp(log_p)


def bayesian_remap(matrix: np.ndarray, prior: np.ndarray, cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Remap each output to the one with the least posterior expected cost.

    Parameters
    ----------
    matrix
        ``(K, M)`` mechanism ``Pr[y | x]``.
    prior
        ``(K,)`` prior over the records.
    cost
        ``(K, M)`` utility cost of reporting output ``y'`` for record ``x``.

    Returns
    -------
    remapped, target
        The ``(K, M)`` matrix of the mechanism followed by the remap, and ``(M,)`` ``target[y] = r(y)``.
    """
    joint = np.asarray(prior, dtype=float)[:, None] * matrix  # Pr[x, y]
    expected = joint.T @ cost  # (M, M): [y, y'] = sum_x Pr[x, y] cost[x, y']
    m = matrix.shape[1]
    target = np.argmin(expected, axis=1)
    # Keep y itself when it is as good as the argmin (up to rounding): the loss can never grow.
    own = expected[np.arange(m), np.arange(m)]
    best = expected[np.arange(m), target]
    target = np.where(own <= best * (1 + 1e-12), np.arange(m), target)
    remapped = np.zeros_like(matrix)
    np.add.at(remapped.T, target, matrix.T)
    return remapped, target


def build_em(instance: Instance, epsilon_per_km: float) -> MechanismResult:
    """Build the exponential mechanism over the instance's outputs, eps-mDP under the instance's metric.

    Parameters
    ----------
    instance
        The problem instance (records, outputs, prior, cost).
    epsilon_per_km
        Privacy budget, 1/km.
    """
    eps = check_epsilon(epsilon_per_km, "build_em")
    t0 = time.perf_counter()
    matrix = em_matrix(output_distances_km(instance), eps)
    return finish("em", eps, instance, matrix, "solved", t0, {"exponent": "eps * d / 2"})


def build_em_br(instance: Instance, epsilon_per_km: float) -> MechanismResult:
    """EM followed by Bayesian remapping under the instance's prior and utility cost.

    Parameters
    ----------
    instance
        The problem instance (records, outputs, prior, cost).
    epsilon_per_km
        Privacy budget, 1/km.
    """
    eps = check_epsilon(epsilon_per_km, "build_em_br")
    t0 = time.perf_counter()
    em = em_matrix(output_distances_km(instance), eps)
    matrix, target = bayesian_remap(em, instance.prior, instance.cost_m)
    details = {
        "exponent": "eps * d / 2",
        "remap": target,
        "n_outputs_used": int(np.unique(target).size),
        "n_outputs_moved": int((target != np.arange(target.size)).sum()),
    }
    return finish("em-br", eps, instance, matrix, "solved", t0, details)
