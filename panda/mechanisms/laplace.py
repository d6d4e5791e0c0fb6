"""Planar Laplace (Andres et al., CCS 2013), snapped to the nearest output: its exact matrix.

The mechanism. All records and outputs live in one tangent plane (equirectangular projection
around the records' centre, :func:`~panda.mechanisms._common.local_plane_km`). To the true location
``x`` it adds a random vector with density ``eps^2 / (2 pi) exp(-eps r)`` (km^-2): the angle is
uniform, the radius ``r`` is Gamma(2, 1/eps) distributed. It reports the output whose *planar*
position is nearest to the noisy point (nearest in the plane, not by great-circle distance: simpler,
and snapping is post-processing either way; ties have probability 0).

Exact matrix (``method="exact"``, the default). ``Pr[y | x]`` is the noise density integrated over
the Voronoi cell of ``y`` in the plane. Along a ray from ``x`` the radial mass between ``r1`` and
``r2`` is exactly ``G(r1) - G(r2)`` with ``G(r) = (1 + eps r) exp(-eps r)``, so every cell is the sum,
over its Voronoi edges, of ``+- (1 / 2 pi) int G(r(theta)) d theta`` along the edge as seen from
``x`` (plus 1 for the cell holding ``x``); each edge is entered or left once per ray, so every row
sums to 1 up to rounding. Each edge integral is one smooth 1-D integral, done with Gauss-Legendre
(:data:`N_NODES` nodes) in a variable that removes its singularities, so only the angle is
discretised and the radial mass is exact. Accuracy, measured: per edge, against mpmath (30 digits)
on 800 random edges (``eps`` 0.5 to 50 /km, the record 1e-7 to 16 km from the edge's line), a
relative error <= 1.7e-12 (<= 6e-10 on slivers whose width is itself set by the rounding of the
geometry); per matrix, against a 64-node, ``T_CUT = 80`` reference (M = 100; Neubrandenburg
K = 200, 500 and Liechtenstein K = 500 at eps 0.5, 5, 50 /km; Kotka K = 200 at 0.5, 2, 5, 20,
50 /km), a total-variation distance <= 4.2e-15 per row and a relative error <= 1.6e-13 per entry
(``bench/bench_laplace.py --check``).
:data:`QUADRATURE_TV_ERROR_BOUND` states 1e-13. A midpoint rule in the angle with the same exact
radial walk (a different method) converges to the same matrix (``tests/panda/test_laplace.py``).

Exactly eps-mDP, by construction. On the plane the mechanism is eps-mDP for the plane's Euclidean
distance, but the audit uses the instance's metric (haversine or road), and the equirectangular
plane stretches distances by up to ~1e-3 against haversine. The noise therefore uses
``eps_plane = eps * min(1, min_{x != x'} d(x, x') / d_plane(x, x'))`` (``details["plane_scale"]``,
~0.999): with it every density ratio is within ``exp(eps d(x, x'))``. The quadrature's rounding is
then removed by :func:`~panda.mechanisms._common.repair_mdp` (the largest matrix below it that meets
every mDP inequality exactly, rows refilled); ``details`` reports what it changed (measured: nothing;
without the calibration it moves up to 3e-4 of a row's mass at 50/km). Probabilities below
:data:`FLOOR` = 1e-300 (``eps r`` beyond ~690; ``exp`` underflows at ~745) are raised to it: the
maximum of a column with a constant keeps every mDP inequality, and the mass is negligible.

Speed: one quadrature per Voronoi edge and record, no sampling, so the exact matrix is also cheaper
than a sampled estimate with enough points to be useful (``bench/bench_laplace.py`` times both;
docs/benchmarks.md, "Planar Laplace").

Sampled estimate (``method="sampled"``): ``n_samples`` noisy points per record snapped to the same
outputs, for teaching what sampling error looks like. It carries sampling error (and zeros where
the true probability is merely small): an exact audit of it measures the estimate, not the
mechanism, and fails. ``details`` reports the largest binomial standard error and a DKW-style bound.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.spatial import cKDTree

from panda.instance import Instance
from panda.mechanisms._common import check_positive, finish, local_plane_km, repair_mdp
from panda.mechanisms.base import MechanismResult, check_epsilon

__all__ = [
    "LAPLACE_METHODS",
    "build_laplace",
    "planar_laplace_density_grid",
    "planar_laplace_matrix",
    "planar_laplace_noise_km",
]

#: ``method`` values of :func:`build_laplace`.
LAPLACE_METHODS = ("exact", "sampled")

#: Gauss-Legendre nodes per edge integral (each of its two parts). Measured total-variation error
#: per row against a 64-node reference on Neubrandenburg (K = 500, M = 100): 16 nodes 1.6e-9,
#: 20 nodes 4.4e-11, 24 nodes 2.7e-13, 32 nodes 1.9e-15 (rounding): 32 is the fewest at rounding level.
N_NODES = 32

#: Each edge integral stops where ``exp(-eps r)`` has fallen by ``exp(-T_CUT)`` from the edge's
#: nearest point (a relative truncation error ~1e-17).
T_CUT = 40.0

#: Smallest probability in the exact matrix (beyond ``eps r ~ 690`` the true value underflows).
FLOOR = 1e-300

#: The stated bound on the quadrature's total-variation error per row: ~25 times the largest
#: measured (4.2e-15, see the module docstring; ``bench/bench_laplace.py --check`` remeasures it).
QUADRATURE_TV_ERROR_BOUND = 1e-13

#: A record's distance to an edge's line is taken as at least this (km): at exactly 0 the edge
#: integral jumps (the record is on the cells' border); the change is ~``eps * 1e-15`` in a probability.
_H_MIN_KM = 1e-15


def planar_laplace_noise_km(epsilon_per_km: float, size: int, *, rng: np.random.Generator) -> np.ndarray:
    """``(size, 2)`` planar Laplace noise vectors (east, north) in km: Gamma(2, 1/eps) radius, uniform angle."""
    r = rng.gamma(shape=2.0, scale=1.0 / float(epsilon_per_km), size=size)
    theta = rng.uniform(0.0, 2.0 * np.pi, size=size)
    return np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)


def planar_laplace_density_grid(
    lon: float,
    lat: float,
    epsilon_per_km: float,
    grid_lon: np.ndarray,
    grid_lat: np.ndarray,
) -> np.ndarray:
    """Density (per km^2) of planar Laplace's noisy point around a true location, on a lon/lat grid.

    The smooth picture behind the mechanism, for a heatmap: ``eps^2 / (2 pi) exp(-eps r)`` with
    ``r`` the distance in the tangent plane at the true location (equirectangular, km). It
    integrates to 1 over the plane (per km^2, not per square degree).

    Parameters
    ----------
    lon, lat
        The true location, degrees.
    epsilon_per_km
        Privacy budget, 1/km.
    grid_lon, grid_lat
        1-D axes of the grid, degrees.

    Returns
    -------
    numpy.ndarray
        ``(len(grid_lat), len(grid_lon))`` densities, rows along latitude (a heatmap's ``z``).
    """
    eps = check_epsilon(epsilon_per_km, "planar_laplace_density_grid")
    gx = np.asarray(grid_lon, dtype=float)
    gy = np.asarray(grid_lat, dtype=float)
    if gx.ndim != 1 or gy.ndim != 1 or not (np.isfinite(gx).all() and np.isfinite(gy).all()):
        msg = (
            "The 'grid_lon' and 'grid_lat' parameters of planar_laplace_density_grid must be finite 1-D arrays. "
            f"Got shapes {gx.shape} and {gy.shape} instead."
        )
        raise ValueError(msg)
    x, _ = local_plane_km(gx, np.full(gx.shape, float(lat)), float(lon), float(lat))
    _, y = local_plane_km(np.full(gy.shape, float(lon)), gy, float(lon), float(lat))
    r = np.hypot(x[None, :], y[:, None])
    return eps * eps / (2.0 * np.pi) * np.exp(-eps * r)


def _voronoi_ridges(points: np.ndarray) -> tuple[np.ndarray, ...]:
    """Compute the Voronoi edges of distinct planar ``points`` (M, 2), exactly, as half-plane intersections.

    Returns ``i, j, mid, t, s_lo, s_hi``: the edge between cells ``i < j`` lies on the bisector
    ``mid + s t`` (``t`` a unit vector, ``n = perp(t)`` points from ``i`` to ``j``) for ``s`` in
    ``[s_lo, s_hi]`` (possibly infinite). Candidates are the Delaunay edges (all pairs when there is
    no triangulation: fewer than 4 points, or all on a line); each is clipped by every other point.
    """
    m = points.shape[0]
    pairs = None
    if m >= 4:
        from scipy.spatial import Delaunay, QhullError

        try:
            tri = Delaunay(points).simplices
        except QhullError:
            tri = None
        if tri is not None:
            e = np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [0, 2]]])
            e.sort(axis=1)
            pairs = np.unique(e, axis=0)
    if pairs is None:
        pi, pj = np.triu_indices(m, k=1)
        pairs = np.stack([pi, pj], axis=1)
    out = []
    step = max(1, 2_000_000 // max(m, 1))
    for s in range(0, pairs.shape[0], step):
        i, j = pairs[s : s + step, 0], pairs[s : s + step, 1]
        d = points[j] - points[i]
        n = d / np.hypot(d[:, 0], d[:, 1])[:, None]
        t = np.stack([-n[:, 1], n[:, 0]], axis=1)
        mid = 0.5 * (points[i] + points[j])
        # |p - y_i|^2 <= |p - y_k|^2 on p = mid + s t  <=>  s * a_k <= b_k.
        rel = points[None, :, :] - mid[:, None, :]  # (R, M, 2): y_k - mid
        a = 2.0 * np.einsum("rmc,rc->rm", rel, t)
        b = np.einsum("rmc,rmc->rm", rel, rel) - 0.25 * np.einsum("rc,rc->r", d, d)[:, None]
        own = np.zeros(a.shape, dtype=bool)
        rows = np.arange(i.size)
        own[rows, i] = own[rows, j] = True
        a[own], b[own] = 0.0, 0.0
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = b / a
        s_hi = np.where(a > 0, bound, np.inf).min(axis=1)
        s_lo = np.where(a < 0, bound, -np.inf).max(axis=1)
        empty = ((a == 0) & (b < 0)).any(axis=1)
        keep = (s_hi > s_lo) & ~empty
        out.append((i[keep], j[keep], mid[keep], t[keep], s_lo[keep], s_hi[keep]))
    return tuple(np.concatenate(parts) for parts in zip(*out, strict=True))


def _edge_piece_mass(
    h: np.ndarray, lo: np.ndarray, hi: np.ndarray, eps: float, n_nodes: int, t_cut: float
) -> np.ndarray:
    """``int G(eps r(alpha)) d alpha`` over a piece of a line seen from a point at distance ``h`` (km).

    The piece is ``s`` in ``[lo, hi]`` along the line from the point's foot (``0 <= lo <= hi <= inf``),
    ``alpha = atan(s / h)``, ``r = sqrt(h^2 + s^2)``, ``G(q) = (1 + q) exp(-q)``. With ``c = eps h``
    and ``w = sqrt(eps (r - h))`` the integral is ``int 2c (1 + c + w^2) exp(-c - w^2) / ((c + w^2)
    sqrt(2c + w^2)) dw``: smooth, a Gaussian-like decay, poles at ``w = +-i sqrt(c), +-i sqrt(2c)``.
    Far part (``w >= 1``, or everything when ``c >= 1``): Gauss-Legendre in ``w`` up to where the decay
    reaches ``exp(-t_cut)``, the factor ``exp(-eps r_start)`` taken out. Foot part (``w < 1`` when
    ``c < 1``, where the poles come close): the angle swept, exactly, minus the integral of
    ``1 - G`` (small and smooth there), again Gauss-Legendre in ``w``. Only pieces that need a part
    evaluate it.
    """
    h = np.maximum(h, _H_MIN_KM)
    c = eps * h
    x, wt = np.polynomial.legendre.leggauss(n_nodes)
    with np.errstate(invalid="ignore", over="ignore"):  # w = sqrt(eps (r - h)), without cancellation
        w1 = np.sqrt(eps * lo * lo / (np.hypot(h, lo) + h))
        w2 = np.where(np.isinf(hi), np.inf, np.sqrt(eps * hi * hi / (np.hypot(h, hi) + h)))
    mass = np.zeros(h.shape)
    wf = np.where(c < 1.0, np.minimum(w2, np.maximum(w1, 1.0)), w1)
    # Foot part [w1, wf]: the angle swept there, minus int (1 - G).
    sel = np.flatnonzero(wf > w1)
    if sel.size:
        hs, ls, cs, a1, b1 = h[sel], lo[sel], c[sel], w1[sel], wf[sel]
        a = b1 * b1 / eps  # r - h at wf
        s_f = np.where(b1 >= w2[sel], hi[sel], np.sqrt(a * (2.0 * hs + a)))
        swept = np.arctan2(hs * (s_f - ls), hs * hs + ls * s_f)
        half = 0.5 * (b1 - a1)
        w = (0.5 * (b1 + a1))[:, None] + half[:, None] * x
        cc = cs[:, None]
        w_sq = w * w
        q = cc + w_sq
        one_minus_g = -np.expm1(-q) - q * np.exp(-q)
        with np.errstate(invalid="ignore", divide="ignore"):
            f = 2.0 * cc * one_minus_g / (q * np.sqrt(2.0 * cc + w_sq))
        mass[sel] = swept - half * (np.nan_to_num(f) @ wt)
    # Far part [wf, we], skipped where exp(-eps r) underflows.
    we = np.minimum(w2, np.sqrt(wf * wf + t_cut))
    sel = np.flatnonzero((we > wf) & (c + wf * wf < 800.0))
    if sel.size:
        a1, b1, cs = wf[sel], we[sel], c[sel]
        half = 0.5 * (b1 - a1)
        w = (0.5 * (b1 + a1))[:, None] + half[:, None] * x
        cc = cs[:, None]
        w_sq = w * w
        q = cc + w_sq
        ws = a1[:, None]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            g = 2.0 * cc * (1.0 + q) / (q * np.sqrt(2.0 * cc + w_sq)) * np.exp(-(w - ws) * (w + ws))
        mass[sel] += np.exp(-(cs + a1 * a1)) * half * (np.nan_to_num(g) @ wt)
    return mass


def planar_laplace_matrix(
    points_km: np.ndarray,
    outputs_km: np.ndarray,
    epsilon_per_km: float,
    *,
    n_nodes: int = N_NODES,
    t_cut: float = T_CUT,
) -> np.ndarray:
    """Exact ``Pr[y | x]`` of planar Laplace snapped to the nearest output, all in one plane.

    Parameters
    ----------
    points_km
        ``(K, 2)`` true locations in the plane, km.
    outputs_km
        ``(M, 2)`` outputs in the plane, km. Outputs at the same position: the first takes the
        cell, the others get probability 0.
    epsilon_per_km
        The noise's budget, 1/km (density ``eps^2 / (2 pi) exp(-eps r)``).
    n_nodes, t_cut
        Quadrature settings (see :data:`N_NODES`, :data:`T_CUT`).

    Returns
    -------
    numpy.ndarray
        ``(K, M)`` row-stochastic matrix (rows sum to 1 within ~1e-15). Entries below ~1e-308
        underflow to 0 (``eps r > ~700``).
    """
    eps = check_epsilon(epsilon_per_km, "planar_laplace_matrix")
    pts = np.asarray(points_km, dtype=float).reshape(-1, 2)
    outs = np.asarray(outputs_km, dtype=float).reshape(-1, 2)
    k, m = pts.shape[0], outs.shape[0]
    matrix = np.zeros((k, m))
    if k == 0 or m == 0:
        return matrix
    gen, col = np.unique(outs, axis=0, return_index=True)  # col: first output at each position
    mu = gen.shape[0]
    d2 = ((pts[:, None, :] - gen[None, :, :]) ** 2).sum(axis=2)
    nearest = np.argmin(d2, axis=1)
    out = np.zeros((k, mu))
    out[np.arange(k), nearest] = 1.0
    if mu > 1:
        ri, rj, mid, t, s_lo, s_hi = _voronoi_ridges(gen)
        n_r = ri.size
        step = max(1, 1_000_000 // max(n_r * n_nodes, 1))
        for s in range(0, k, step):
            p = pts[s : s + step]
            kc = p.shape[0]
            rel = p[:, None, :] - mid[None, :, :]  # (kc, R, 2)
            along = np.einsum("krc,rc->kr", rel, t)
            h = np.abs(rel[..., 0] * t[None, :, 1] - rel[..., 1] * t[None, :, 0])  # |rel . n|
            lo = (s_lo[None, :] - along).ravel()
            hi = (s_hi[None, :] - along).ravel()
            hr = h.ravel()
            # The part of the edge ahead of the foot, and the part behind it (mirrored).
            both = _edge_piece_mass(
                np.concatenate([hr, hr]),
                np.concatenate([np.maximum(lo, 0.0), np.maximum(-hi, 0.0)]),
                np.concatenate([np.maximum(hi, 0.0), np.maximum(-lo, 0.0)]),
                eps,
                n_nodes,
                t_cut,
            )
            j_mass = ((both[: hr.size] + both[hr.size :]) / (2.0 * np.pi)).reshape(kc, n_r)
            # A ray from x crosses the edge from x's side into the other cell: + for the far cell.
            on_j = d2[s : s + step][:, rj] < d2[s : s + step][:, ri]
            far = np.where(on_j, ri[None, :], rj[None, :])
            near = np.where(on_j, rj[None, :], ri[None, :])
            base = (np.arange(kc) * mu)[:, None]
            idx = np.concatenate([(base + far).ravel(), (base + near).ravel()])
            w = np.concatenate([j_mass.ravel(), -j_mass.ravel()])
            out[s : s + step] += np.bincount(idx, weights=w, minlength=kc * mu).reshape(kc, mu)
    matrix[:, col] = np.maximum(out, 0.0)
    return matrix


def _check_options(method: object, n_samples: object, confidence: object) -> tuple[str, int]:
    if not (isinstance(method, str) and method in LAPLACE_METHODS):
        msg = f"The 'method' parameter of build_laplace must be one of {LAPLACE_METHODS}. Got {method!r} instead."
        raise ValueError(msg)
    n = int(check_positive(n_samples, "n_samples", "build_laplace", integer=True))
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        msg = f"The 'confidence' parameter of build_laplace must be a float in (0, 1). Got {confidence!r} instead."
        raise ValueError(msg)
    return method, n


def _plane_scale(instance: Instance, x: np.ndarray, y: np.ndarray) -> float:
    """``min(1, min d(x, x') / d_plane(x, x'))`` over record pairs apart in the plane (1 if none)."""
    d = instance.d_km
    k = x.size
    scale = 1.0
    step = max(1, 4_000_000 // max(k, 1))
    for s in range(0, k, step):
        dp = np.hypot(x[s : s + step, None] - x[None, :], y[s : s + step, None] - y[None, :])
        apart = dp > 0
        if apart.any():
            scale = min(scale, float((d[s : s + step][apart] / dp[apart]).min()))
    return scale if scale > 0 else 1.0


def build_laplace(
    instance: Instance,
    epsilon_per_km: float,
    *,
    method: str = "exact",
    n_samples: int = 20_000,
    rng: np.random.Generator | int | None = None,
    confidence: float = 0.95,
) -> MechanismResult:
    """Planar Laplace snapped to the nearest output (in the plane): its exact, exactly eps-mDP matrix.

    Parameters
    ----------
    instance
        The problem instance.
    epsilon_per_km
        Privacy budget, 1/km.
    method
        ``"exact"`` (default): the matrix by deterministic quadrature, then the exact mDP repair
        (see the module docstring); an exact audit under the instance's metric passes.
        ``"sampled"``: estimated from ``n_samples`` noisy points per record (sampling error; an
        exact audit fails on it).
    n_samples
        Noisy points drawn per record (``"sampled"`` only).
    rng
        Random generator or seed (``"sampled"`` only; every estimate is reproducible from it).
    confidence
        Confidence level of the simultaneous (all records, all outputs) DKW-style error bound
        (``"sampled"`` only).

    Returns
    -------
    MechanismResult
        ``details`` (both methods) holds ``method``, ``estimated``, ``plane`` (centre, projection),
        ``plane_scale`` and ``epsilon_plane_per_km`` (the noise's budget in the plane). ``"exact"``
        adds ``quadrature`` (nodes, truncation), ``quadrature_tv_error_bound`` (per row, and how it
        was measured), ``n_floored_entries`` (raised to :data:`FLOOR`), ``max_row_sum_error`` (before
        the repair), and ``repair``: ``max_log_excess_before`` (largest ``ln P[x, y] - ln P[x', y] -
        eps d(x, x')`` before it), ``mass_moved`` (largest L1 change of a row), ``passes``.
        ``"sampled"`` adds ``n_samples``, ``max_standard_error`` (largest ``sqrt(p(1-p)/n)`` over
        the entries, ``p`` the estimate), ``dkw_bound`` (with probability ``confidence`` every entry
        is within it of the true probability), ``confidence`` and ``n_zero_entries``.
    """
    eps = check_epsilon(epsilon_per_km, "build_laplace")
    method, n = _check_options(method, n_samples, confidence)
    t0 = time.perf_counter()
    lon, lat = instance.lon, instance.lat
    lon0, lat0 = float(np.mean(lon)), float(np.mean(lat))
    x, y = local_plane_km(lon, lat, lon0, lat0)
    scale = _plane_scale(instance, x, y)
    eps_plane = eps * scale
    out = instance.outputs
    details: dict = {
        "method": method,
        "estimated": method == "sampled",
        "plane": {"lon0": lon0, "lat0": lat0, "projection": "equirectangular"},
        "plane_scale": scale,
        "epsilon_plane_per_km": eps_plane,
    }
    if method == "sampled":
        matrix = _sampled_matrix(x, y, out, eps_plane, n, np.random.default_rng(rng))
        details.update(_sampling_error(matrix, n, instance.n_records, confidence))
        return finish("laplace", eps, instance, matrix, "solved", t0, details)
    matrix, exact = _exact_matrix(np.stack([x, y], axis=1), out, eps_plane, instance.d_km, eps)
    details.update(exact)
    return finish("laplace", eps, instance, matrix, "solved", t0, details)


def _exact_matrix(
    points: np.ndarray, out: np.ndarray, eps_plane: float, d_km: np.ndarray, eps: float
) -> tuple[np.ndarray, dict]:
    """Compute the quadrature's matrix, floor it at :data:`FLOOR`, repair it to exactly eps-mDP; say what changed.

    ``points`` are the records in the plane (km), ``out`` the outputs' positions among them; the noise uses
    ``eps_plane``, the repair ``eps`` under the instance's metric ``d_km``.
    """
    raw = planar_laplace_matrix(points, points[out], eps_plane)
    # Outputs sharing a position: their later copies keep a zero column (0/0 is no evidence).
    _, first = np.unique(points[out], axis=0, return_index=True)
    live = np.zeros(out.size, dtype=bool)
    live[first] = True
    floored = live[None, :] & (raw < FLOOR)
    raw[floored] = FLOOR
    row_error = float(np.abs(raw.sum(axis=1) - 1.0).max())
    matrix, info = repair_mdp(raw, d_km, eps)
    moved = float(np.abs(matrix - raw / raw.sum(axis=1, keepdims=True)).sum(axis=1).max())
    return matrix, {
        "quadrature": {"nodes": N_NODES, "t_cut": T_CUT, "rule": "Gauss-Legendre per Voronoi edge"},
        "quadrature_tv_error_bound": QUADRATURE_TV_ERROR_BOUND,
        "quadrature_tv_error_note": (
            "~25x the largest total-variation distance per row (4.2e-15) measured against a 64-node, "
            "T_CUT=80 reference on Neubrandenburg, Liechtenstein and Kotka (K <= 500, M = 100, eps 0.5 to "
            "50 per km); bench/bench_laplace.py --check remeasures it"
        ),
        "n_floored_entries": int(floored.sum()),
        "max_row_sum_error": row_error,
        "repair": {
            "max_log_excess_before": float(info.get("max_log_excess_before", 0.0)),
            "mass_moved": moved,
            "passes": int(info.get("passes", 0)),
            "rows_renormalised": int(info.get("rows_renormalised", 0)),
        },
    }


def _sampling_error(matrix: np.ndarray, n: int, k: int, confidence: float) -> dict:
    """Report a sampled matrix's error: the largest binomial standard error and a simultaneous DKW-style bound."""
    se = np.sqrt(matrix * (1 - matrix) / n)
    # DKW: for one row, sup_t |F_n - F| <= sqrt(ln(2/a) / (2n)) w.p. 1 - a; a cell is a difference
    # of two CDF values (any fixed output order), so twice that; a union bound over the K rows.
    alpha = 1.0 - confidence
    return {
        "n_samples": n,
        "max_standard_error": float(se.max()),
        "dkw_bound": 2.0 * float(np.sqrt(np.log(2.0 * k / alpha) / (2.0 * n))),
        "confidence": confidence,
        "n_zero_entries": int((matrix == 0).sum()),
    }


def _sampled_matrix(
    x: np.ndarray, y: np.ndarray, out: np.ndarray, eps: float, n: int, gen: np.random.Generator
) -> np.ndarray:
    """Frequencies of the nearest output (in the plane) over ``n`` noisy points per record."""
    tree = cKDTree(np.stack([x[out], y[out]], axis=1))
    k, m = x.size, out.size
    matrix = np.zeros((k, m))
    chunk = max(1, 2_000_000 // n)
    for start in range(0, k, chunk):
        rows = np.arange(start, min(k, start + chunk))
        noise = planar_laplace_noise_km(eps, rows.size * n, rng=gen).reshape(rows.size, n, 2)
        px = x[rows, None] + noise[..., 0]
        py = y[rows, None] + noise[..., 1]
        _, nearest = tree.query(np.stack([px.ravel(), py.ravel()], axis=1))
        idx = (np.repeat(np.arange(rows.size), n) * m + nearest).astype(np.int64)
        matrix[rows] = np.bincount(idx, minlength=rows.size * m).reshape(rows.size, m) / n
    return matrix
