"""Planar Laplace's exact matrix: exact audits, agreement with sampling and independent references."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import integrate, special

from panda import load_city, make_instance
from panda.audit import audit_mechanism
from panda.compare import audit_columns
from panda.mechanisms import build_laplace
from panda.mechanisms._common import local_plane_km
from panda.mechanisms.laplace import (
    FLOOR,
    LAPLACE_METHODS,
    planar_laplace_density_grid,
    planar_laplace_matrix,
)


@pytest.fixture(scope="module")
def kotka_haversine(kotka):
    return make_instance(kotka, n_records=60, n_outputs=20, n_users=10, seed=3)


@pytest.fixture(scope="module")
def kotka_road(kotka):
    return make_instance(kotka, n_records=60, n_outputs=20, n_users=10, seed=3, metric="road")


def _plane(instance):
    x, y = local_plane_km(instance.lon, instance.lat, float(np.mean(instance.lon)), float(np.mean(instance.lat)))
    return np.stack([x, y], axis=1)


def _ray_reference(points, outputs, eps, n_angles):
    """Independent reference: midpoint rule in the angle, the nearest-output intervals along each ray exact.

    Along ``x + r u`` the nearest output minimises ``|y_j - x|^2 - 2 r u.(y_j - x)`` (lines in ``r``); the
    walk follows their lower envelope and adds ``G(r_in) - G(r_out)`` for each interval.
    """
    theta = (np.arange(n_angles) + 0.5) * 2 * np.pi / n_angles
    u = np.stack([np.cos(theta), np.sin(theta)], axis=1)

    def surv(r):
        with np.errstate(invalid="ignore", over="ignore"):
            return np.where(np.isinf(r), 0.0, (1 + eps * r) * np.exp(-eps * r))

    out = np.zeros((len(points), len(outputs)))
    for xi, x in enumerate(points):
        rel = outputs - x
        a = (rel**2).sum(axis=1)
        b = -2.0 * u @ rel.T
        cur = np.full(n_angles, np.argmin(a))
        r0 = np.zeros(n_angles)
        idx = np.arange(n_angles)
        while idx.size:
            ac, bc = a[cur[idx]], b[idx, cur[idx]]
            with np.errstate(divide="ignore", invalid="ignore"):
                cross = (a[None, :] - ac[:, None]) / (bc[:, None] - b[idx])
            cross[~(b[idx] < bc[:, None]) | (cross <= r0[idx, None])] = np.inf
            nxt = np.argmin(cross, axis=1)
            rn = cross[np.arange(idx.size), nxt]
            np.add.at(out[xi], cur[idx], (surv(r0[idx]) - surv(rn)) / n_angles)
            r0[idx], cur[idx] = rn, nxt
            idx = idx[np.isfinite(rn)]
    return out


# --- the exact audit passes by construction ------------------------------------------------------


@pytest.mark.parametrize("metric", ["haversine", "road"])
@pytest.mark.parametrize("eps", [0.5, 5.0, 50.0])
def test_exact_matrix_passes_the_exact_audit(kotka_haversine, kotka_road, metric, eps):
    instance = kotka_haversine if metric == "haversine" else kotka_road
    result = build_laplace(instance, eps)
    assert result.solved and result.name == "laplace"
    np.testing.assert_allclose(result.matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert (result.matrix > 0).all()
    audit = audit_mechanism(result.matrix, instance.d_km, eps)
    assert audit.passed, audit.worst[:3]
    assert audit.n_violations == 0
    assert audit.n_pairs_checked == instance.n_records * (instance.n_records - 1) // 2
    # Not vacuous: the matrix uses nearly all of its budget.
    assert 0.99 * eps < audit.epsilon_min_per_km <= eps * (1 + 1e-9)
    info = result.details
    assert info["method"] == "exact" and not info["estimated"]
    assert 0.99 < info["plane_scale"] <= 1.0
    assert info["epsilon_plane_per_km"] == pytest.approx(eps * info["plane_scale"])
    assert info["quadrature_tv_error_bound"] <= 1e-12
    assert info["max_row_sum_error"] < 1e-13
    assert info["repair"]["mass_moved"] < 1e-9


def test_exact_audit_passes_where_probabilities_underflow():
    """Liechtenstein is ~22 km long: at 50/km ``exp(-eps r)`` underflows, entries are floored, still exact."""
    instance = make_instance(load_city("liechtenstein"), n_records=60, n_outputs=20, n_users=5, seed=0)
    result = build_laplace(instance, 50.0)
    assert result.details["n_floored_entries"] > 0
    assert result.matrix.min() >= FLOOR * (1 - 1e-12)
    assert audit_mechanism(result.matrix, instance.d_km, 50.0).passed
    np.testing.assert_allclose(result.matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_the_sampled_estimate_fails_the_exact_audit(kotka_haversine):
    """Why the exact matrix matters: sampling zeros and noise read as violations of every size."""
    eps = 5.0
    sampled = build_laplace(kotka_haversine, eps, method="sampled", n_samples=5_000, rng=1)
    assert sampled.details["estimated"] and sampled.details["n_zero_entries"] > 0
    audit = audit_mechanism(sampled.matrix, kotka_haversine.d_km, eps)
    assert not audit.passed
    assert audit.epsilon_min_per_km == np.inf
    assert audit_mechanism(build_laplace(kotka_haversine, eps).matrix, kotka_haversine.d_km, eps).passed


def test_compare_audits_the_exact_matrix_and_skips_only_the_estimate(kotka_haversine):
    eps = 5.0
    exact = build_laplace(kotka_haversine, eps)
    cols = audit_columns(kotka_haversine, "laplace", exact, audit_sample_pairs=20_000, seed=0)
    assert "audit_note" not in cols
    assert cols["violation_rate"] == 0.0 and cols["epsilon_min_per_km"] <= eps
    sampled = build_laplace(kotka_haversine, eps, method="sampled", n_samples=2_000, rng=0)
    cols = audit_columns(kotka_haversine, "laplace", sampled, audit_sample_pairs=20_000, seed=0)
    assert "sampled estimate" in cols["audit_note"] and np.isnan(cols["violation_rate"])


# --- accuracy -------------------------------------------------------------------------------------


def test_exact_matrix_agrees_with_a_large_monte_carlo_sample(kotka):
    """Every entry within 6 binomial standard errors, and the chi-square statistic within 5 sd of its mean.

    n = 200,000 noisy points per record (the sampled method samples the same mechanism: same plane,
    budget and snapping). Under the exact matrix ``z = (p_hat - p) / sqrt(p (1 - p) / n)`` is ~N(0, 1)
    per entry: |z| > 6 somewhere among the 160 entries has probability < 1e-6, and
    ``sum z^2`` (entries with ``n p >= 5``) is ~chi-square. A wrong geometry or a wrong constant moves
    entries by many standard errors (one se is <= 0.0011 here).
    """
    instance = make_instance(kotka, n_records=16, n_outputs=10, n_users=5, seed=7)
    eps = 3.0
    n = 200_000
    exact = build_laplace(instance, eps).matrix
    sampled = build_laplace(instance, eps, method="sampled", n_samples=n, rng=2024).matrix
    se = np.sqrt(exact * (1 - exact) / n)
    z = (sampled - exact) / np.maximum(se, 1e-300)
    assert np.abs(z).max() < 6.0
    big = exact * n >= 5
    df = int(big.sum())
    assert df > 60
    assert (z[big] ** 2).sum() < df + 5 * np.sqrt(2 * df)
    # The test has power: a 5 % error in the budget is caught.
    wrong = build_laplace(instance, eps * 1.05).matrix
    z_wrong = (sampled - wrong) / np.sqrt(wrong * (1 - wrong) / n)
    assert (z_wrong[big] ** 2).sum() > df + 5 * np.sqrt(2 * df)


@pytest.mark.parametrize("eps", [0.5, 50.0])
def test_exact_matrix_agrees_with_an_independent_ray_integration(kotka, eps):
    """A different method (exact along rays, midpoint rule in the angle) converges to the same matrix."""
    instance = make_instance(kotka, n_records=12, n_outputs=10, n_users=5, seed=1)
    pts = _plane(instance)
    exact = planar_laplace_matrix(pts, pts[instance.outputs], eps)
    ref = _ray_reference(pts, pts[instance.outputs], eps, n_angles=8192)
    assert 0.5 * np.abs(exact - ref).sum(axis=1).max() < 1e-5


def test_rows_sum_to_one_on_random_planes():
    rng = np.random.default_rng(0)
    for m in (1, 2, 3, 7, 60):
        outputs = rng.uniform(-3, 3, size=(m, 2))
        points = np.concatenate([rng.uniform(-5, 5, size=(40, 2)), outputs[:3]])
        for eps in (0.5, 5.0, 50.0):
            p = planar_laplace_matrix(points, outputs, eps)
            assert p.shape == (points.shape[0], m) and (p >= 0).all()
            np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def _beyond_line(c):
    """Mass of planar Laplace beyond a line at distance ``c / eps``: ``(1/pi) int_c^inf t K_1(t) dt``."""
    value, _ = integrate.quad(lambda t: t * special.k1(t), c, np.inf, epsabs=0, epsrel=1e-13, limit=200)
    return value / np.pi


@pytest.mark.parametrize("eps", [0.5, 5.0, 50.0])
def test_two_and_three_outputs_match_the_marginal(eps):
    """Two outputs: a half-plane; three collinear outputs: a strip (the x marginal ``eps^2 |x| K_1(eps |x|) / pi``)."""
    outputs = np.array([[-0.1, 0.3], [0.3, 0.3]])  # bisector x = 0.1
    points = np.array([[-0.2, 0.0], [0.05, 1.0]])
    p = planar_laplace_matrix(points, outputs, eps)
    for row, x in zip(p, points[:, 0], strict=True):
        assert row[1] == pytest.approx(_beyond_line(eps * (0.1 - x)), rel=1e-10)
    outputs = np.array([[0.0, 0.0], [0.4, 0.0], [1.0, 0.0]])  # strips x < 0.2 < x < 0.7 < x
    p = planar_laplace_matrix(np.array([[0.25, 0.5]]), outputs, eps)[0]
    expected_far = _beyond_line(eps * 0.45)
    assert p[2] == pytest.approx(expected_far, rel=1e-10)
    assert p[0] == pytest.approx(_beyond_line(eps * 0.05), rel=1e-10)
    assert p[1] == pytest.approx(1 - p[0] - p[2], abs=1e-15)


def test_outputs_at_one_position_share_nothing():
    outputs = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    p = planar_laplace_matrix(np.array([[0.1, 0.2], [0.9, 0.9]]), outputs, 5.0)
    assert (p[:, 2] == 0).all() and (p[:, [0, 1, 3]] > 0).all()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)


# --- the smooth picture ---------------------------------------------------------------------------


def test_density_grid_is_the_planar_laplace_density():
    lon, lat, eps = 26.95, 60.47, 5.0
    grid_lon = np.linspace(lon - 0.05, lon + 0.05, 401)
    grid_lat = np.linspace(lat - 0.025, lat + 0.025, 401)
    dens = planar_laplace_density_grid(lon, lat, eps, grid_lon, grid_lat)
    assert dens.shape == (401, 401)
    assert dens[200, 200] == pytest.approx(eps**2 / (2 * np.pi))
    # Riemann sum over the grid in km^2: the grid spans ~2.8 km each way, eps r >= 7 at its edge.
    dx = np.radians(grid_lon[1] - grid_lon[0]) * 6371.0088 * np.cos(np.radians(lat))
    dy = np.radians(grid_lat[1] - grid_lat[0]) * 6371.0088
    total = dens.sum() * dx * dy
    assert 0.98 < total <= 1.0 + 1e-3
    np.testing.assert_allclose(dens, dens[::-1, ::-1], rtol=1e-9)  # symmetric about the location


def test_density_grid_validates():
    with pytest.raises(ValueError, match="grid_lon"):
        planar_laplace_density_grid(0.0, 0.0, 1.0, np.zeros((2, 2)), np.zeros(3))
    with pytest.raises(TypeError, match="epsilon_per_km"):
        planar_laplace_density_grid(0.0, 0.0, "1", np.zeros(2), np.zeros(3))


# --- options ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["monte-carlo", "", None, 1])
def test_bad_method_raises(kotka_haversine, method):
    msg = f"The 'method' parameter of build_laplace must be one of {LAPLACE_METHODS}. Got {method!r} instead."
    with pytest.raises(ValueError, match=re.escape(msg)):
        build_laplace(kotka_haversine, 5.0, method=method)


def test_bad_sampling_options_raise(kotka_haversine):
    with pytest.raises(ValueError, match="n_samples"):
        build_laplace(kotka_haversine, 5.0, method="sampled", n_samples=0)
    with pytest.raises(ValueError, match="confidence"):
        build_laplace(kotka_haversine, 5.0, method="sampled", confidence=1.5)
