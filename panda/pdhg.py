"""A restarted primal-dual hybrid gradient (PDHG) solver for box-bounded LPs, in numpy.

Solves::

    minimise   c . x
    subject to A[:n_eq] x  = b[:n_eq]
               A[n_eq:] x >= b[n_eq:]
               lower <= x <= upper        (every bound finite)

with Ruiz and Pock-Chambolle scaling and the primal weight ``omega`` re-balanced at every restart
(PDLP's rule), by one of two schemes:

* ``"halpern"`` (the default): restarted reflected Halpern PDHG (Lu and Yang 2024, as in cuPDLPx,
  Lu, Peng and Yang 2025). Each step maps ``z`` to ``(k+1)/(k+2) (2 T(z) - z) + 1/(k+2) z_0``, where
  ``T`` is one PDHG step of constant size ``0.998 / ||A||`` and ``z_0`` the anchor (the point of the
  last restart); restarts, to the last PDHG point, on the decay of the fixed-point error
  ``||z - T(z)||`` in PDHG's norm. No averages are kept.
* ``"adaptive"`` (and ``"constant"``): PDLP (Applegate et al. 2021), its adaptive step size (from
  ``0.95 / ||A||``; ``"constant"`` keeps that), iterates averaged since the last restart (weighted
  by the step), adaptive restarts to the average or the current point on the KKT error.

Both need only two sparse products a step (more when the adaptive rule takes a step again shorter),
so they are fast where an interior point's factorisation is not (the optimal mDP LP's pair rows,
``bench/bench_pdhg_step.py``), and they warm-start from any primal and dual point. Halpern's
scheme is the better one from a warm start: with it the optimal LP's rounds
(:func:`panda.optimal.solve_optimal`) end with smaller gaps in the same time
(``bench/bench_pdhg_schemes.py``; docs/benchmarks.md). From zero, on the first of those LPs, the
two take about the same number of steps to a given bound.

Because every variable is boxed, **every** dual point ``y`` (with ``y >= 0`` on the inequality
rows, which the projection keeps) gives a valid lower bound by weak duality::

    b . y + sum_j min(lower_j rc_j, upper_j rc_j),   rc = c - A^T y

so a caller can stop at any time and still hold a proven bound; the primal point is only
approximately feasible and needs a repair to be used.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from panda import _pdhg_blocks

__all__ = ["PdhgResult", "SCHEMES", "pdhg", "box_dual_bound"]

#: The iteration schemes (see the module docstring).
SCHEMES = ("halpern", "adaptive", "constant")

#: Restart rules (PDLP's defaults): sufficient and necessary decay of the KKT error, and the
#: share of all iterations after which a restart is forced.
_SUFFICIENT, _NECESSARY, _ARTIFICIAL = 0.2, 0.8, 0.36

#: ``pdhg(blocks=...)``: run Halpern's steps compiled (:mod:`panda._pdhg_blocks`) when numba imports
#: and the iterations are float32. ``False``: numpy's steps always (for comparisons).
BLOCK_STEPS = True

#: Halpern's restart rules (cuPDLPx's defaults), on the fixed-point error: sufficient and necessary
#: decay, and the share of this call's steps after which a restart is forced.
_H_SUFFICIENT, _H_NECESSARY, _H_ARTIFICIAL = 0.2, 0.5, 0.36


@dataclass(frozen=True)
class PdhgResult:
    """Outcome of :func:`pdhg`: the last candidate (the average or the current point), unscaled."""

    x: np.ndarray
    y: np.ndarray
    iterations: int
    omega: float
    step_size: float
    time_s: float
    stopped_by_callback: bool
    steps: str = "numpy"  # "compiled": Halpern's block steps of panda._pdhg_blocks ran


def box_dual_bound(
    c: np.ndarray, a: sp.spmatrix, b: np.ndarray, lower: np.ndarray, upper: np.ndarray, y: np.ndarray
) -> float:
    """Return the weak-duality bound ``b . y + sum min(lower rc, upper rc)`` of a dual point (see the module)."""
    rc = c - a.T @ y
    return float(b @ y + np.where(rc > 0, lower * rc, upper * rc).sum())


def _primal_weight(omega: float, dx: float, dy: float) -> float:
    """PDLP's primal weight update at a restart: halfway (in logs) to ``dy / dx``, the moves since the last."""
    if dx > 1e-10 and dy > 1e-10:
        return float(np.exp(0.5 * np.log(dy / dx) + 0.5 * np.log(omega)))
    return omega


def _step(
    a: sp.csr_matrix,
    c: np.ndarray,
    b: np.ndarray,
    b_nz: np.ndarray,
    n_eq: int,
    lo: np.ndarray,
    hi: np.ndarray,
    tau: float,
    sigma: float,
    point: tuple[np.ndarray, np.ndarray, np.ndarray],
    out: tuple[np.ndarray, np.ndarray, np.ndarray],
    work: tuple[np.ndarray, np.ndarray],
) -> None:
    """One PDHG step from ``point = (x, y, A^T y)`` into ``out = (x_new, x_bar, y_new)``, in place.

    ``x_new = proj(x - tau (c - A^T y))``, ``x_bar = 2 x_new - x`` (the extrapolated point) and
    ``y_new = proj(y + sigma (b - A x_bar))``, ``b`` nonzero only on ``b_nz``; ``work`` holds two
    scratch vectors (primal, dual size). In place because fresh vector-sized temporaries each step
    cost more than the two sparse products; the product is of the extrapolated point, so no ``A x``
    is kept from step to step.
    """
    x, y, aty = point
    x_new, x_bar, y_new = out
    tmp_x, tmp_y = work
    np.subtract(aty, c, out=tmp_x)
    tmp_x *= tau
    tmp_x += x
    np.maximum(tmp_x, lo, out=x_new)
    np.minimum(x_new, hi, out=x_new)
    np.multiply(x_new, 2.0, out=x_bar)
    x_bar -= x
    np.multiply(a @ x_bar, -sigma, out=tmp_y)
    tmp_y[b_nz] += sigma * b[b_nz]
    np.add(y, tmp_y, out=y_new)
    np.maximum(y_new[n_eq:], 0.0, out=y_new[n_eq:])


def _scale(a: sp.csr_matrix, ruiz_passes: int = 10) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """Ruiz equilibration, then Pock-Chambolle (alpha = 1): ``A_s = diag(r) A diag(c)``.

    On the nonzeros directly: sparse diagonal products would rebuild the matrix twice a pass, which
    is costly on the optimal LP's large row sets.
    """
    a = sp.csr_matrix(a, dtype=float)
    n_rows, n_cols = a.shape
    row_of = np.repeat(np.arange(n_rows), np.diff(a.indptr))
    col_of = a.indices
    mag = np.abs(a.data)
    rows, cols = np.ones(n_rows), np.ones(n_cols)

    def rescale(r: np.ndarray, c: np.ndarray) -> None:
        nonlocal rows, cols
        mag[:] *= r[row_of] * c[col_of]
        rows, cols = rows * r, cols * c

    for _ in range(ruiz_passes):
        r_max, c_max = np.zeros(n_rows), np.zeros(n_cols)
        np.maximum.at(r_max, row_of, mag)
        np.maximum.at(c_max, col_of, mag)
        rescale(1.0 / np.sqrt(np.maximum(r_max, 1e-30)), 1.0 / np.sqrt(np.maximum(c_max, 1e-30)))
    r_sum = np.bincount(row_of, weights=mag, minlength=n_rows)
    c_sum = np.bincount(col_of, weights=mag, minlength=n_cols)
    rescale(1.0 / np.sqrt(np.maximum(r_sum, 1e-30)), 1.0 / np.sqrt(np.maximum(c_sum, 1e-30)))
    scaled = sp.csr_matrix((a.data * rows[row_of] * cols[col_of], col_of.copy(), a.indptr.copy()), shape=a.shape)
    return scaled, rows, cols


def pdhg(
    c: np.ndarray,
    a: sp.spmatrix,
    b: np.ndarray,
    n_eq: int,
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    time_limit_s: float,
    max_iterations: int | None = None,
    x0: np.ndarray | None = None,
    y0: np.ndarray | None = None,
    omega: float | None = None,
    step_size: float | None = None,
    steps_before: int = 0,
    on_check: Callable[[np.ndarray, np.ndarray], bool] | None = None,
    check_every_s: float = 0.5,
    check_every_steps: int = 64,
    callback_every_steps: int | None = None,
    dtype: type = np.float64,
    scheme: str = "halpern",
    blocks: tuple[int, int] | None = None,
) -> PdhgResult:
    """Run restarted PDHG until ``time_limit_s``, ``max_iterations`` or until ``on_check`` returns True.

    Parameters
    ----------
    c, a, b, n_eq, lower, upper
        The LP (see the module docstring); ``a`` sparse ``(rows, cols)``, bounds finite.
    time_limit_s
        Wall time for this call, seconds (checked every ``check_every_steps`` steps).
    max_iterations
        Stop after this many steps (rounded up to a multiple of ``check_every_steps``); ``None``: no
        cap. Iterates do not depend on the clock, so a run stopped by this cap is reproducible.
    x0, y0
        Warm start (primal, dual); zeros by default. ``y0`` is clipped to ``>= 0`` on inequalities.
    omega
        Primal weight to start from (a previous call's ``omega`` when warm-starting);
        ``||c|| / ||b||`` of the scaled problem by default.
    step_size
        ``"adaptive"``: the step size to start from (a previous call's ``step_size`` when
        warm-starting); ``0.95 / ||A||`` by default. The other schemes' steps are constant.
    steps_before
        ``"adaptive"``: steps taken by earlier calls this one continues (PDLP's step rule counts all
        steps). Halpern's forced restarts count this call's steps only, and its primal weight moves by
        PDLP's rule, not cuPDLPx's PID control: in the warm-started rounds of
        :func:`panda.optimal.solve_optimal` these rules give the stronger bounds after the same rounds
        (docs/benchmarks.md).
    on_check
        Called with the current candidate ``(x, y)`` (unscaled) at most every ``check_every_s``
        seconds, or every ``callback_every_steps`` steps when that is given (a multiple of
        ``check_every_steps``; the calls then do not depend on the clock); return True to stop.
    scheme
        ``"halpern"`` (default), ``"adaptive"`` or ``"constant"`` (see the module docstring). PDLP's
        adaptive step takes the largest step the local interaction of each move allows instead of
        the constant ``0.95 / ||A||``, and reaches a given bound in fewer steps than it; Halpern's
        scheme in fewer still on the tests' random LPs, and it is the faster one in the optimal LP's
        warm-started rounds (``bench/bench_pdhg_schemes.py``; docs/benchmarks.md).
    blocks
        ``(k, m)`` when the LP has the optimal LP's block form (:mod:`panda._pdhg_blocks`: ``k m``
        columns in ``m`` blocks of ``k``, the ``n_eq = k`` row sums first, then inequality rows
        with two entries in one block, sorted by block, ``b`` zero on them): Halpern's steps then
        run compiled on every core when :data:`BLOCK_STEPS` is on, numba imports and ``dtype`` is
        float32 (a cheaper step, ``bench/bench_pdhg_step.py``; the same iterates up to rounding).
        ValueError if the LP does not have that form.
    dtype
        Precision of the iterations (``np.float32`` halves the memory traffic of a step, which is
        what bounds its time; the adaptive scheme's running averages and the returned point stay
        float64). A dual point of either precision gives a valid bound when evaluated in float64
        (weak duality holds for any multipliers).
    """
    t0 = time.perf_counter()
    if scheme not in SCHEMES:
        msg = f"The 'scheme' parameter of pdhg must be one of {SCHEMES}. Got {scheme!r} instead."
        raise ValueError(msg)
    lp = _ScaledLp.of(c, a, b, n_eq, lower, upper, np.dtype(dtype))
    x, y = lp.start(x0, y0)
    step = 0.95 / lp.norm_bound()
    if omega is None:
        omega = max(float(np.linalg.norm(lp.c)), 1e-12) / max(float(np.linalg.norm(lp.b)), 1e-12)
    block_form = lp.block_form(blocks)  # validates the form whatever runs the steps
    checks = _Checks(t0, time_limit_s, max_iterations, on_check, check_every_s, check_every_steps, callback_every_steps)
    if scheme == "halpern":
        # cuPDLPx's constant step, 0.998 / ||A|| (the same safety margin on the norm's estimate).
        eta_h = 0.998 / 0.95 * step
        compiled = block_form is not None and BLOCK_STEPS and _pdhg_blocks.AVAILABLE and lp.dtype == np.float32
        x_end, y_end, it, omega = _Halpern(lp, eta_h, block_form if compiled else None).run(x, y, omega, checks)
        return lp.result(x_end, y_end, it, omega, eta_h, checks, "compiled" if compiled else "numpy")
    # The step size (tau = eta / omega, sigma = eta omega); adaptive: from a previous call's when given.
    adaptive_step = scheme == "adaptive"
    eta_step = step if step_size is None or not adaptive_step else float(step_size)
    x_best, y_best, it, omega, eta_step = _Pdlp(lp, adaptive_step, steps_before).run(x, y, omega, eta_step, checks)
    return lp.result(x_best, y_best, it, omega, eta_step, checks, "numpy")


@dataclass(frozen=True)
class _ScaledLp:
    """The LP scaled by :func:`_scale` in the iterations' precision, and what undoes the scaling.

    ``c, a, a_t, b, lo, hi`` are scaled (``a_t`` is ``a``'s transpose, kept as CSR for the dual products);
    ``dr, dc`` are the row and column factors, ``lower, upper`` the caller's bounds (float64).
    """

    c: np.ndarray
    a: sp.csr_matrix
    a_t: sp.csr_matrix
    b: np.ndarray
    n_eq: int
    lo: np.ndarray
    hi: np.ndarray
    dr: np.ndarray
    dc: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    @property
    def dtype(self) -> np.dtype:
        """The iterations' precision."""
        return self.c.dtype

    @classmethod
    def of(
        cls, c: np.ndarray, a: sp.spmatrix, b: np.ndarray, n_eq: int, lower: np.ndarray, upper: np.ndarray, dt: np.dtype
    ) -> _ScaledLp:
        """Check the bounds (ValueError unless finite), scale the LP and cast it to ``dt``."""
        c = np.asarray(c, dtype=float)
        b = np.asarray(b, dtype=float)
        lower = np.asarray(lower, dtype=float)
        upper = np.asarray(upper, dtype=float)
        if not (np.isfinite(lower).all() and np.isfinite(upper).all()):
            msg = "pdhg needs finite bounds on every variable."
            raise ValueError(msg)
        a_s, dr, dc = _scale(sp.csr_matrix(a))
        a_s = a_s.astype(dt)
        a_t = a_s.T.tocsr()
        cs, bs, lo, hi = (v.astype(dt) for v in (c * dc, b * dr, lower / dc, upper / dc))
        return cls(cs, a_s, a_t, bs, n_eq, lo, hi, dr, dc, lower, upper)

    def start(self, x0: np.ndarray | None, y0: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Return the scaled start ``(x, y)``: the warm start or zeros, ``x`` boxed, ``y >= 0`` on inequalities."""
        dt, dc, dr = self.dtype, self.dc, self.dr
        n_rows, n_cols = self.a.shape
        x = np.zeros(n_cols, dt) if x0 is None else (np.asarray(x0, dtype=float) / dc).astype(dt)
        x = np.clip(x, self.lo, self.hi)
        y = np.zeros(n_rows, dt) if y0 is None else (np.asarray(y0, dtype=float) / dr).astype(dt)
        y[self.n_eq :] = np.maximum(y[self.n_eq :], 0.0)
        return x, y

    def norm_bound(self) -> float:
        """Return ``||A_s||_2`` by power iteration, a little over (an over-estimate is safe: the steps divide by it)."""
        dt = self.dtype
        v = np.random.default_rng(0).standard_normal(self.a.shape[1]).astype(dt)
        norm2 = 1.0
        for _ in range(30):
            v = self.a_t @ (self.a @ v)
            norm2 = float(np.linalg.norm(v))
            v /= norm2
        return np.sqrt(norm2 * (1.01 if dt == np.float64 else 1.02))

    def block_form(self, blocks: tuple[int, int] | None) -> _pdhg_blocks.Blocks | None:
        """Return the block form of ``pdhg(blocks=...)`` (``None`` without it); ValueError if the LP lacks it."""
        if blocks is None:
            return None
        k_b, m_b = blocks
        if self.n_eq != k_b or np.any(self.b[self.n_eq :]):
            msg = f"pdhg(blocks={blocks}): the LP must have n_eq = {k_b} row sums and b = 0 on the other rows."
            raise ValueError(msg)
        return _pdhg_blocks.blocks_of(self.a, k_b, m_b)

    def kkt(self, omega: float, x: np.ndarray, y: np.ndarray, ax: np.ndarray, aty: np.ndarray) -> float:
        """Return the KKT error of a point: scaled primal residual and duality gap (no dual residual: all boxed)."""
        res = self.b - ax
        res[self.n_eq :] = np.maximum(res[self.n_eq :], 0.0)
        rc = self.c - aty
        gap = self.c @ x - (self.b @ y + np.where(rc > 0, self.lo * rc, self.hi * rc).sum())
        return float(np.sqrt(omega**2 * (res @ res) + gap**2))

    def result(
        self, x: np.ndarray, y: np.ndarray, it: int, omega: float, step_size: float, checks: _Checks, steps: str
    ) -> PdhgResult:
        """Return a run's :class:`PdhgResult`, its point ``(x, y)`` unscaled."""
        return PdhgResult(
            x=np.clip(x * self.dc, self.lower, self.upper),  # unscaling may step an ulp past a bound
            y=y * self.dr,
            iterations=it,
            omega=float(omega),
            step_size=float(step_size),
            time_s=time.perf_counter() - checks.t0,
            stopped_by_callback=checks.stopped,
            steps=steps,
        )


class _Checks:
    """What a run does at its checks (every ``check_every_steps`` steps) for the caller of :func:`pdhg`.

    It calls ``on_check`` when due (by the clock, or by the steps when ``callback_every_steps`` is given) and
    tells the run to stop on the callback's word, at the time limit or at ``max_iterations``.
    """

    def __init__(
        self,
        t0: float,
        time_limit_s: float,
        max_iterations: int | None,
        on_check: Callable[[np.ndarray, np.ndarray], bool] | None,
        check_every_s: float,
        check_every_steps: int,
        callback_every_steps: int | None,
    ) -> None:
        self.t0 = t0
        self.time_limit_s = time_limit_s
        self.max_iterations = max_iterations
        self.on_check = on_check
        self.check_every_s = check_every_s
        self.every_steps = check_every_steps
        self.callback_every_steps = callback_every_steps
        self.last_check = -np.inf
        self.stopped = False  # True once on_check asked to stop

    def stop(self, it: int, lp: _ScaledLp, x: np.ndarray, y: np.ndarray) -> bool:
        """At the check after step ``it``, with the candidate ``(x, y)`` (scaled): return True to stop the run."""
        elapsed = time.perf_counter() - self.t0
        if self.callback_every_steps is None:
            due = elapsed - self.last_check >= self.check_every_s
        else:
            due = it % self.callback_every_steps == 0
        if self.on_check is not None and due:
            self.last_check = elapsed
            if self.on_check(x * lp.dc, y * lp.dr):
                self.stopped = True
                return True
        return elapsed >= self.time_limit_s or (self.max_iterations is not None and it >= self.max_iterations)


def _restart_due(
    error: float, error_restart: float, error_last: float, since: int, steps: int, rules: tuple[float, float, float]
) -> bool:
    """Return True when a run restarts: PDLP's and cuPDLPx's rule on the decay of an error.

    ``rules = (sufficient, necessary, artificial)``: the error fell below ``sufficient`` times its value at
    the last restart, or below ``necessary`` times it and grew since the last check (``error_last``), or the
    ``since`` steps since the restart are ``artificial`` of all ``steps`` (a forced restart).
    """
    sufficient, necessary, artificial = rules
    return (
        error <= sufficient * error_restart
        or (error <= necessary * error_restart and error > error_last)
        or since >= artificial * steps
    )


class _RunningSums:
    """Sums of ``x`` and ``y`` since the last restart, for PDLP's step-weighted averages.

    Each step adds into working-precision sums (``part``), flushed into float64 ``totals`` at every check
    (every ``check_every_steps`` steps), so the working precision's rounding spans at most that many steps,
    and a step passes over float32 vectors only (float64 sums every step would add a sizeable share to its
    time).
    """

    def __init__(self, lp: _ScaledLp) -> None:
        n_rows, n_cols = lp.a.shape
        self.part = [np.zeros(n_cols, lp.dtype), np.zeros(n_rows, lp.dtype)]
        self.totals = [np.zeros(n_cols), np.zeros(n_rows)]

    def flush(self) -> None:
        """Add the working-precision sums into the totals and zero them."""
        for total, acc in zip(self.totals, self.part, strict=True):
            total += acc
            acc[:] = 0.0

    def clear(self) -> None:
        """Zero the totals (at a restart; the working-precision sums were just flushed)."""
        for acc in self.totals:
            acc[:] = 0.0


@dataclass(frozen=True)
class _Pdlp:
    """PDLP's restarted PDHG on a scaled LP (``pdhg(scheme="adaptive")`` or ``"constant"``), averaged iterates."""

    lp: _ScaledLp
    adaptive: bool  # PDLP's adaptive step size; False: the step stays the one given
    steps_before: int  # steps of earlier calls this one continues (PDLP's step rule counts all steps)

    def candidate(
        self, omega: float, point: tuple[np.ndarray, np.ndarray, np.ndarray], sums: _RunningSums, count: float
    ) -> tuple[tuple, float]:
        """At a check: return the average or the current point, whichever has the smaller KKT error, and that error.

        ``point = (x, y, A^T y)``; a candidate is ``(x, y, A x, A^T y)``, ``A x`` ``None`` for the current point.
        """
        a, a_t = self.lp.a, self.lp.a_t
        x, y, aty = point
        dt = x.dtype
        sums.flush()
        avg_x, avg_y = sums.totals[0] / count, sums.totals[1] / count
        avg = (avg_x, avg_y, a @ avg_x.astype(dt), a_t @ avg_y.astype(dt))
        k_avg, k_cur = self.lp.kkt(omega, *avg), self.lp.kkt(omega, x, y, a @ x, aty)
        return (avg, k_avg) if k_avg < k_cur else ((x.copy(), y.copy(), None, aty), k_cur)

    def restart(
        self, cand: tuple, anchor: tuple[np.ndarray, np.ndarray], omega: float, sums: _RunningSums
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, tuple[np.ndarray, np.ndarray]]:
        """Restart at the candidate (emptying the sums): return its ``(x, y, A^T y)``, the new ``omega`` and anchor."""
        x, y, aty = (arr.astype(self.lp.dtype) for arr in (cand[0], cand[1], cand[3]))  # copies
        # Re-balance primal and dual progress (PDLP's smoothing 0.5).
        omega = _primal_weight(omega, float(np.linalg.norm(x - anchor[0])), float(np.linalg.norm(y - anchor[1])))
        sums.clear()
        return x, y, aty, omega, (x.copy(), y.copy())

    def run(
        self, x: np.ndarray, y: np.ndarray, omega: float, eta_step: float, checks: _Checks
    ) -> tuple[np.ndarray, np.ndarray, int, float, float]:
        """Iterate from ``(x, y)``; return the last candidate (scaled), the steps, ``omega`` and the step size."""
        c, a, a_t, b, n_eq, lo, hi = self.lp.c, self.lp.a, self.lp.a_t, self.lp.b, self.lp.n_eq, self.lp.lo, self.lp.hi
        adaptive_step, steps_before, check_every_steps = self.adaptive, self.steps_before, checks.every_steps
        dt = x.dtype
        aty = a_t @ y
        b_nz = np.flatnonzero(b)  # sigma b is added on these rows only (the LP's row sums)
        sums = _RunningSums(self.lp)
        part = sums.part
        count = 0.0
        anchor = (x.copy(), y.copy())
        k_restart, k_last = self.lp.kkt(omega, x, y, a @ x, aty), np.inf
        it = it_restart = 0
        best = (x, y)
        x_new, y_new = np.empty_like(x), np.empty_like(y)
        dx, x_bar, tmp_x = np.empty_like(x), np.empty_like(x), np.empty_like(x)
        dy = np.empty_like(y)
        while True:
            while True:
                tau, sigma = dt.type(eta_step / omega), dt.type(eta_step * omega)
                _step(a, c, b, b_nz, n_eq, lo, hi, tau, sigma, (x, y, aty), (x_new, x_bar, y_new), (tmp_x, dy))
                np.subtract(x_bar, x_new, out=dx)  # x_new - x
                aty_new = a_t @ y_new
                weight = eta_step
                if not adaptive_step:
                    break
                # PDLP's adaptive step (Applegate et al. 2021, algorithm 3): the largest step the local
                # interaction of the move allows, growing slowly; a step beyond it is taken again shorter.
                np.subtract(y_new, y, out=dy)
                np.subtract(aty_new, aty, out=tmp_x)
                interaction = abs(float(dx @ tmp_x))
                movement = 0.5 * omega * float(dx @ dx) + 0.5 / omega * float(dy @ dy)
                limit = movement / interaction if interaction > 0 else np.inf
                # PDLP counts from 1; at 1 the first factor below is 0 (the step would stay 0).
                k = steps_before + it + 2
                grow = (1 + k**-0.6) * eta_step
                eta_step = grow if limit == np.inf else min((1 - k**-0.3) * limit, grow)
                if weight <= limit:
                    break
            x, x_new = x_new, x
            y, y_new, aty = y_new, y, aty_new
            # Averages weighted by the step (PDLP's).
            np.multiply(x, weight, out=tmp_x)
            part[0] += tmp_x
            np.multiply(y, weight, out=dy)
            part[1] += dy
            count += weight
            it += 1
            if it % check_every_steps:
                continue
            cand, k_cand = self.candidate(omega, (x, y, aty), sums, count)
            best = (cand[0], cand[1])
            if checks.stop(it, self.lp, cand[0], cand[1]):
                break
            restart = _restart_due(
                k_cand, k_restart, k_last, it - it_restart, it, (_SUFFICIENT, _NECESSARY, _ARTIFICIAL)
            )
            k_last = k_cand
            if restart:
                x, y, aty, omega, anchor = self.restart(cand, anchor, omega, sums)
                k_restart, k_last, it_restart = k_cand, np.inf, it
                count = 0.0
        return best[0], best[1], it, omega, eta_step


def _fixed_point_error(
    eta: float,
    omega: float,
    point: tuple[np.ndarray, np.ndarray, np.ndarray],
    pdhg_point: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> float:
    """Return Halpern's fixed-point error ``||z - T(z)||`` in PDHG's norm.

    The norm is ``[[omega / eta, A^T], [A, 1 / (eta omega)]]``; ``point = (x, y, A^T y)`` is ``z``,
    ``pdhg_point = (x_hat, y_hat, A^T y_hat)`` its PDHG point ``T(z)``. The norm's cross term comes from
    the products at hand (``dy . A dx = dx . A^T dy``).
    """
    x, y, aty = point
    x_hat, y_hat, aty_hat = pdhg_point
    dx, dy = x - x_hat, y - y_hat
    r2 = omega / eta * float(dx @ dx) + float(dy @ dy) / (eta * omega) + 2.0 * float(dx @ (aty - aty_hat))
    return float(np.sqrt(max(r2, 0.0)))


def _reflect(
    w: np.floating,
    point: tuple[np.ndarray, np.ndarray, np.ndarray],
    new: tuple[np.ndarray, np.ndarray, np.ndarray],
    anchor: tuple[np.ndarray, np.ndarray, np.ndarray],
    work: tuple[np.ndarray, np.ndarray],
) -> None:
    """Halpern with reflection, in place: ``z <- w (2 T(z) - z) + (1 - w) anchor``; ``A^T y`` follows linearly.

    ``point = (x, y, A^T y)``, ``new = (x_bar, y_hat, A^T y_hat)`` (``x_bar = 2 x_hat - x`` is already the
    primal reflection), ``work`` two scratch vectors (primal, dual size).
    """
    x, y, aty = point
    x_bar, y_hat, aty_hat = new
    tmp_x, tmp_y = work
    v = w.dtype.type(1.0) - w
    np.multiply(x_bar, w, out=x)
    np.multiply(anchor[0], v, out=tmp_x)
    x += tmp_x
    for cur, nxt, start, buf in ((y, y_hat, anchor[1], tmp_y), (aty, aty_hat, anchor[2], tmp_x)):
        np.multiply(nxt, 2.0, out=buf)
        buf -= cur
        np.multiply(buf, w, out=cur)
        np.multiply(start, v, out=buf)
        cur += buf


@dataclass(frozen=True)
class _Halpern:
    """Restarted reflected Halpern PDHG on a scaled LP (``pdhg(scheme="halpern")``), constant step ``eta``."""

    lp: _ScaledLp
    eta: float
    blocks: _pdhg_blocks.Blocks | None = None  # the compiled block steps (float32), else numpy's

    def run(
        self, x: np.ndarray, y: np.ndarray, omega: float, checks: _Checks
    ) -> tuple[np.ndarray, np.ndarray, int, float]:
        """Iterate from ``(x, y)`` (modified in place); return the last PDHG point (scaled), the steps and ``omega``."""
        c, a, a_t, b, n_eq, lo, hi = self.lp.c, self.lp.a, self.lp.a_t, self.lp.b, self.lp.n_eq, self.lp.lo, self.lp.hi
        eta, check_every_steps = self.eta, checks.every_steps
        dt = x.dtype
        aty = a_t @ y
        b_nz = np.flatnonzero(b)  # sigma b is added on these rows only (the LP's row sums)
        anchor = (x.copy(), y.copy(), aty.copy())
        x_hat, x_bar, tmp_x, aty_hat = (np.empty_like(x) for _ in range(4))
        y_hat, tmp_y = np.empty_like(y), np.empty_like(y)
        row_terms = np.empty((0, 0) if self.blocks is None else self.blocks.row_sums.shape, dt)
        it = k = 0
        r, r_anchor, r_last = 0.0, -1.0, np.inf
        while True:
            tau, sigma = dt.type(eta / omega), dt.type(eta * omega)
            # Steps up to the next check (one after a restart: it measures the anchor's error). The last of
            # them leaves (x, y, A^T y) at its start and its PDHG point T(z) in the hats: the fixed-point
            # error is measured there, then Halpern's update is applied here.
            n = 1 if r_anchor < 0 else check_every_steps - it % check_every_steps
            weights = (np.arange(k, k + n) + 1.0) / (np.arange(k, k + n) + 2.0)
            weights = weights.astype(dt)
            if self.blocks is not None:
                _pdhg_blocks.steps(
                    self.blocks, c, b, lo, hi, tau, sigma, weights,
                    (x, y, aty), (x_hat, x_bar, y_hat, aty_hat), anchor, row_terms,
                )  # fmt: skip
            else:
                for i in range(n):
                    # T(z); its extrapolated point x_bar is also the primal half of the reflection 2 T(z) - z.
                    _step(a, c, b, b_nz, n_eq, lo, hi, tau, sigma, (x, y, aty), (x_hat, x_bar, y_hat), (tmp_x, tmp_y))
                    aty_hat = a_t @ y_hat
                    if i < n - 1:
                        _reflect(weights[i], (x, y, aty), (x_bar, y_hat, aty_hat), anchor, (tmp_x, tmp_y))
            it += n
            k += n - 1
            check = it % check_every_steps == 0
            if check or r_anchor < 0:
                r = _fixed_point_error(eta, omega, (x, y, aty), (x_hat, y_hat, aty_hat))
                r_anchor = r if r_anchor < 0 else r_anchor
            _reflect(weights[-1], (x, y, aty), (x_bar, y_hat, aty_hat), anchor, (tmp_x, tmp_y))
            k += 1
            if not check:
                continue
            if checks.stop(it, self.lp, x_hat, y_hat):
                break
            restart = _restart_due(r, r_anchor, r_last, k, it, (_H_SUFFICIENT, _H_NECESSARY, _H_ARTIFICIAL))
            r_last = r
            if restart:  # to the last PDHG point, which becomes the anchor
                dx_norm = float(np.linalg.norm(x_hat - anchor[0]))
                omega = _primal_weight(omega, dx_norm, float(np.linalg.norm(y_hat - anchor[1])))
                x[:], y[:], aty[:] = x_hat, y_hat, aty_hat
                anchor = (x_hat.copy(), y_hat.copy(), aty_hat.copy())
                k, r_anchor, r_last = 0, -1.0, np.inf
        return x_hat, y_hat, it, omega
