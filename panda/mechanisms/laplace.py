"""Planar Laplace (Andres et al., CCS 2013), snapped to the nearest output: for teaching.

The planar Laplace mechanism adds to the true location a random vector with density proportional
to ``exp(-eps r)`` on the plane: in polar coordinates the angle is uniform and the radius ``r`` is
Gamma(2, 1/eps) distributed (km). On the continuous plane it is eps-geo-indistinguishable with
respect to the Euclidean distance. Snapping the noisy point to the nearest output (great-circle
distance) is a deterministic function of the noisy point: post-processing keeps the guarantee.

All records and noisy points live in one tangent plane (equirectangular projection around the
records' centre), so the guarantee is exact with respect to the Euclidean distance of that plane.
It agrees with the haversine metric to a relative ~1e-3 over a city (the projection's scale error
grows with the north-south extent); road distances are longer still, so the guarantee carries over.

The matrix ``Pr[y | x]`` is *estimated* by sampling ``n_samples`` noisy points per record: an
estimated matrix carries sampling error (and zeros where the true probability is merely small), so
an exact audit of it measures the estimate, not the mechanism. ``details`` reports the error:
the largest binomial standard error of an entry and a DKW-style simultaneous bound.
"""

from __future__ import annotations

import time

import numpy as np
from scipy.spatial import cKDTree

from panda.instance import Instance
from panda.mechanisms._common import check_positive, finish, local_plane_km
from panda.mechanisms.base import MechanismResult, check_epsilon
from panda.network import EARTH_RADIUS_KM

__all__ = ["build_laplace", "planar_laplace_noise_km"]


def planar_laplace_noise_km(epsilon_per_km: float, size: int, *, rng: np.random.Generator) -> np.ndarray:
    """``(size, 2)`` planar Laplace noise vectors (east, north) in km: Gamma(2, 1/eps) radius, uniform angle."""
    r = rng.gamma(shape=2.0, scale=1.0 / float(epsilon_per_km), size=size)
    theta = rng.uniform(0.0, 2.0 * np.pi, size=size)
    return np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1)


def _unit_vectors(lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    lon_r, lat_r = np.radians(lon), np.radians(lat)
    return np.stack([np.cos(lat_r) * np.cos(lon_r), np.cos(lat_r) * np.sin(lon_r), np.sin(lat_r)], axis=-1)


def build_laplace(
    instance: Instance,
    epsilon_per_km: float,
    *,
    n_samples: int = 20_000,
    rng: np.random.Generator | int | None = None,
    confidence: float = 0.95,
) -> MechanismResult:
    """Planar Laplace snapped to the nearest output, its matrix estimated by sampling.

    Parameters
    ----------
    instance
        The problem instance.
    epsilon_per_km
        Privacy budget, 1/km.
    n_samples
        Noisy points drawn per record.
    rng
        Random generator or seed (every estimate is reproducible from it).
    confidence
        Confidence level of the simultaneous (all records, all outputs) DKW-style error bound.

    Returns
    -------
    MechanismResult
        ``details`` holds ``n_samples``, ``max_standard_error`` (largest ``sqrt(p(1-p)/n)`` over the
        entries, with ``p`` the estimate), ``dkw_bound`` (with probability ``confidence`` every entry
        is within it of the true probability), and ``n_zero_entries``.
    """
    eps = check_epsilon(epsilon_per_km, "build_laplace")
    n = int(check_positive(n_samples, "n_samples", "build_laplace", integer=True))
    if not (isinstance(confidence, float) and 0 < confidence < 1):
        msg = f"The 'confidence' parameter of build_laplace must be a float in (0, 1). Got {confidence!r} instead."
        raise ValueError(msg)
    gen = np.random.default_rng(rng)
    t0 = time.perf_counter()
    lon, lat = instance.lon, instance.lat
    lon0, lat0 = float(np.mean(lon)), float(np.mean(lat))
    x, y = local_plane_km(lon, lat, lon0, lat0)
    out = instance.outputs
    # Nearest output by great-circle distance = nearest by chord between unit vectors (monotone).
    tree = cKDTree(_unit_vectors(lon[out], lat[out]))
    k, m = instance.n_records, instance.n_outputs
    matrix = np.zeros((k, m))
    coslat0 = np.cos(np.radians(lat0))
    chunk = max(1, 2_000_000 // n)
    for start in range(0, k, chunk):
        rows = np.arange(start, min(k, start + chunk))
        noise = planar_laplace_noise_km(eps, rows.size * n, rng=gen).reshape(rows.size, n, 2)
        px = x[rows, None] + noise[..., 0]
        py = y[rows, None] + noise[..., 1]
        plon = lon0 + np.degrees(px / (EARTH_RADIUS_KM * coslat0))
        plat = np.clip(lat0 + np.degrees(py / EARTH_RADIUS_KM), -90.0, 90.0)
        _, nearest = tree.query(_unit_vectors(plon.ravel(), plat.ravel()))
        idx = (np.repeat(np.arange(rows.size), n) * m + nearest).astype(np.int64)
        matrix[rows] = np.bincount(idx, minlength=rows.size * m).reshape(rows.size, m) / n
    se = np.sqrt(matrix * (1 - matrix) / n)
    # DKW: for one row, sup_t |F_n - F| <= sqrt(ln(2/a) / (2n)) w.p. 1 - a; a cell is a difference of
    # two CDF values (any fixed output order), so twice that; a union bound over the K rows.
    alpha = 1.0 - confidence
    dkw = 2.0 * float(np.sqrt(np.log(2.0 * k / alpha) / (2.0 * n)))
    details = {
        "n_samples": n,
        "max_standard_error": float(se.max()),
        "dkw_bound": dkw,
        "confidence": confidence,
        "n_zero_entries": int((matrix == 0).sum()),
        "plane": {"lon0": lon0, "lat0": lat0, "projection": "equirectangular"},
        "estimated": True,
    }
    return finish("laplace", eps, instance, matrix, "solved", t0, details)
