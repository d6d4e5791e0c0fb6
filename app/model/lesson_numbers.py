"""The lesson's numbers: places, one mechanism's rows, two places compared, what an attacker infers.

Pure numpy (no streamlit, no plotting): the Lesson page and its tests call these. Distances leave this
module in metres unless a name says km; log-ratios are in nats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import panda
from app.model.panda_numbers import fmt_m

__all__ = [
    "MECHANISMS",
    "BASELINE_KEYS",
    "REPEATED_MECHANISMS",
    "PANDA_KEYS",
    "PairCheck",
    "default_place",
    "second_place",
    "expected_error_m",
    "pair_check",
    "ratio_sentence",
    "posterior",
    "bayes_guess",
    "times",
    "geoind_verdict",
    "DecayAgreement",
    "decay_agreement",
    "same_decay_sentence",
]

#: Mechanism key (stable option value) -> (label, one line for students). The order is the selector's.
MECHANISMS: dict[str, tuple[str, str]] = {
    "laplace": (
        "Planar Laplace",
        "Add random noise to the true position (the farther, the less likely), then report the nearest output.",
    ),
    "em": ("Exponential (EM)", "Report each output with a probability that falls with its distance."),
    "em-br": (
        "EM + remap",
        "EM, then the server moves each report to the place that is best on average given what it knows.",
    ),
    "lp-ca": (
        "LP on cells",
        "An optimised mechanism solved on a coarse 8 × 8 grid, one place per cell, every place reporting like its "
        "cell's: the guarantee holds between the cells' places, not always between two places (the check says).",
    ),
    "lp-em": (
        "LP + EM",
        "An optimised mechanism: each output's probabilities are optimised for its 38 nearest places, the "
        "exponential mechanism elsewhere. Seconds on the default 500 places.",
    ),
    "lp": ("Optimal (LP)", "The best possible utility under the guarantee: a linear program (slow)."),
    "panda-e": (
        "PAnDA-e",
        "PAnDA (exponential anchor selection): upload a random set of anchor places, then perturb among them.",
    ),
    "panda-p": (
        "PAnDA-p",
        "PAnDA with a power-law anchor selection (the chance of picking a place falls as a power of distance).",
    ),
    "panda-l": ("PAnDA-l", "PAnDA with a logistic anchor selection (an S-shaped fall with distance)."),
}
BASELINE_KEYS = ("laplace", "em", "em-br", "lp-ca", "lp-em", "lp")
#: The mechanisms on the repeated-reports chart (besides the one shown): the fast ones with a full matrix.
REPEATED_MECHANISMS = ("laplace", "em", "em-br")
PANDA_KEYS = {"panda-e": "exponential", "panda-p": "power", "panda-l": "logistic"}


#: The Lesson's ε scale (1/km): even steps of a log scale a class can read, from 0.5 to 50 (the controls' range).
EPSILON_STEPS = (0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.5, 10.0, 12.5, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0)


def epsilon_options(current: float) -> list[float]:
    """The ε scale, with ``current`` (a link's or the sidebar's value between two steps) kept in its place."""
    return sorted({*EPSILON_STEPS, float(current)})


def doubling_distance_m(epsilon_per_km: float) -> float:
    """ε read in metres: two places closer than this may be told apart by at most a factor 2 (ln 2 / ε)."""
    return 1000.0 * math.log(2.0) / float(epsilon_per_km)


def times(log_ratio: float) -> str:
    """A log-ratio (nats) as a likelihood factor a student reads: 'x2.7', 'x1,200', 'x∞'."""
    if not math.isfinite(log_ratio):
        return "×∞"
    f = math.exp(min(abs(log_ratio), 700.0))
    if f < 10:
        return f"×{f:.2f}" if f < 1.995 else f"×{f:.1f}"
    if f < 1e6:
        return f"×{f:,.0f}"
    return f"×{f:.1e}"


def default_place(instance: panda.Instance) -> int:
    """The record nearest to the records' median position (a central place of the city)."""
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    c_lon, c_lat = float(np.median(lon)), float(np.median(lat))
    k = math.cos(math.radians(c_lat))
    return int(np.argmin(((lon - c_lon) * k) ** 2 + (lat - c_lat) ** 2))


def second_place(instance: panda.Instance, a: int, *, target_m: float = 300.0) -> int:
    """The record whose privacy distance from ``a`` is closest to ``target_m`` (never ``a`` itself)."""
    d_m = 1000.0 * np.asarray(instance.distances_km(np.array([a]), None), dtype=float)[0]
    score = np.abs(d_m - target_m)
    score[a] = np.inf
    score[d_m <= 0] = np.inf  # a distinct record at the same position tells nothing
    if not np.isfinite(score).any():
        return int((a + 1) % instance.n_records)
    return int(np.argmin(score))


def expected_error_m(row: np.ndarray, cost_row_m: np.ndarray) -> float:
    """Expected utility cost (metres) of one record's report distribution."""
    return float(np.dot(np.asarray(row, dtype=float), np.asarray(cost_row_m, dtype=float)))


@dataclass(frozen=True)
class PairCheck:
    """Two places compared output by output (nats; ``inf`` where one row is zero and the other not).

    ``log_ratio[y] = ln P[a, y] - ln P[b, y]`` (``nan`` where both are zero: no evidence either way);
    ``allowed = eps * d`` is what eps-geo-indistinguishability allows; ``phase1`` is what PAnDA's anchor
    upload already reveals about the pair (0 for the other mechanisms); the check holds when
    ``worst + phase1 <= allowed`` (with a 1e-9 relative tolerance for floating point).
    """

    log_ratio: np.ndarray
    d_m: float
    epsilon_per_km: float
    phase1: float = 0.0

    @property
    def allowed(self) -> float:
        """eps * d in nats."""
        return self.epsilon_per_km * self.d_m / 1000.0

    @property
    def worst(self) -> float:
        """max_y |ln P[a, y] - ln P[b, y]| over the outputs with evidence (0 if none)."""
        v = np.abs(self.log_ratio[~np.isnan(self.log_ratio)])
        return float(v.max()) if v.size else 0.0

    @property
    def worst_output(self) -> int:
        """The output (position in Y) where the two places differ most (-1 if none)."""
        v = np.abs(np.where(np.isnan(self.log_ratio), -1.0, self.log_ratio))
        return int(np.argmax(v)) if v.size and v.max() >= 0 else -1

    @property
    def holds(self) -> bool:
        """True when the pair satisfies eps-mDP (including PAnDA's Phase-I leak)."""
        total = self.worst + self.phase1
        return bool(total <= self.allowed * (1 + 1e-9) + 1e-12)


def pair_check(
    row_a: np.ndarray, row_b: np.ndarray, d_km: float, epsilon_per_km: float, *, phase1: float = 0.0
) -> PairCheck:
    """Compare two report distributions output by output (see :class:`PairCheck`)."""
    a, b = np.asarray(row_a, dtype=float), np.asarray(row_b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.log(a) - np.log(b)
    lr = np.where((a == 0) & (b == 0), np.nan, lr)
    return PairCheck(log_ratio=lr, d_m=1000.0 * float(d_km), epsilon_per_km=float(epsilon_per_km), phase1=float(phase1))


def ratio_sentence(check: PairCheck, *, verdict: bool = True) -> str:
    """The sentence a student reads about two places (markdown); ``verdict=False`` leaves out the judgement."""
    allowed = f"ε = {check.epsilon_per_km:g}/km allows {times(check.allowed)} for places {fmt_m(check.d_m)} apart"
    head = f"A report is at most **{times(check.worst)}** likelier from one place than from the other; {allowed}"
    if check.phase1 > 0:
        head += (
            f". PAnDA's anchor upload already tells them apart by up to {times(check.phase1)}, so together "
            f"**{times(check.worst + check.phase1)}**"
        )
    if not verdict:
        return f"{head}."
    judged = "✓ within the promise." if check.holds else "✗ **beyond the promise**: an attacker can tell them apart."
    return f"{head}. {judged}"


def loss_help(loss: str, n_tasks: int = 1) -> str:
    """The help text of "Error at A" and of the map's ring: what the expected loss measures."""
    common = (
        " averaged over A's reports. Every mechanism here is judged by it, and the optimising ones (the optimal LP, "
        "LP on cells, LP+EM, PAnDA, EM's remapping) minimise it. The orange ring on the map has this radius. "
        "Change it in the sidebar: *Loss*."
    )
    if loss == "road":
        return "What privacy costs this person: how far A's report is from A along the roads," + common
    if loss == "straight":
        return "What privacy costs this person: how far A's report is from A in a straight line," + common
    tasks = "one task (the paper's setup)" if n_tasks == 1 else f"{n_tasks} tasks"
    return (
        "What privacy costs this person under the paper's task cost: how much A's report changes the road distance "
        f"to a service's tasks, |road(task, A) - road(task, report)|, over {tasks}, not the distance from A to its "
        "report (a far report at the same road distance from the task is free)," + common
    )


def posterior(prior: np.ndarray, matrix: np.ndarray, y: int) -> np.ndarray:
    """``(K,)`` the attacker's belief ``Pr[x | report y]``, proportional to ``prior[x] * P[x, y]``."""
    joint = np.asarray(prior, dtype=float) * np.asarray(matrix, dtype=float)[:, int(y)]
    total = joint.sum()
    if total <= 0:
        return np.full(joint.size, 1.0 / joint.size)
    return joint / total


def bayes_guess(post: np.ndarray, distance_m: np.ndarray) -> int:
    """The Bayes-optimal guess: the record with the least expected distance to the truth under ``post``."""
    return int(np.argmin(np.asarray(post, dtype=float) @ np.asarray(distance_m, dtype=float)))


def geoind_verdict(rate: float) -> str:
    """The *Geo-ind.* metric's value for a failed check: "✗ 21 %", "✗ 0.4 %", "✗ <0.1 %".

    Short enough for a third of the Lesson's right column at 1280x720 with the sidebar open (the share's
    meaning is in the metric's help).
    """
    if not math.isfinite(rate):
        return "✗"
    if rate >= 0.01:
        return f"✗ {100 * rate:.0f} %"
    if rate >= 0.001:
        return f"✗ {100 * rate:.1f} %"
    return "✗ <0.1 %"


@dataclass(frozen=True)
class DecayAgreement:
    """How close two PAnDA decays' selection probabilities are on one view (see :func:`decay_agreement`)."""

    gamma_km: float
    #: The largest relative difference of the two selection probabilities at distances below gamma.
    max_rel_near: float
    #: The two far values (every record at distance >= gamma).
    far: tuple[float, float]

    @property
    def max_rel(self) -> float:
        """The largest relative difference at any distance (below gamma, or the far values)."""
        a, b = self.far
        return max(self.max_rel_near, abs(a - b) / max(a, b))


def decay_agreement(
    config_a: panda.PandaConfig,
    config_b: panda.PandaConfig,
    instance: panda.Instance,
    *,
    n_points: int = 2000,
) -> DecayAgreement | None:
    """Compare two configs' selection probabilities w(d) on ``instance`` (``None`` if their gammas differ).

    gamma is what a run uses (:func:`panda.anchors.resolve_gamma_km`); below it w is each decay's h(d)
    (sampled on ``n_points`` distances from 0), beyond it each config's constant far value.
    """
    from panda.anchors import far_value, resolve_gamma_km, selection_probabilities

    gamma_a, gamma_b = resolve_gamma_km(config_a, instance), resolve_gamma_km(config_b, instance)
    if not math.isclose(gamma_a, gamma_b, rel_tol=1e-9):
        return None
    d = np.linspace(0.0, gamma_a, n_points, endpoint=False)
    wa = selection_probabilities(d, config_a, gamma_km=gamma_a)
    wb = selection_probabilities(d, config_b, gamma_km=gamma_a)
    rel = float(np.max(np.abs(wa - wb) / np.maximum(wa, wb)))
    return DecayAgreement(gamma_a, rel, (far_value(config_a, gamma_a), far_value(config_b, gamma_a)))


#: Below this relative difference of w, two decays are said to give (nearly) the same mechanism.
SAME_DECAY_REL = 1e-3


def _sci(v: float) -> str:
    """0.000095 -> "9.5·10⁻⁵" (3 significant digits at most)."""
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.3g}"
    mant, exp = f"{v:.2e}".split("e")
    sup = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
    return f"{float(mant):g}·10{str(int(exp)).translate(sup)}"


def same_decay_sentence(
    agreement: DecayAgreement | None, n_records: int, names: tuple[str, str] = ("PAnDA-e", "PAnDA-l")
) -> str:
    """One markdown sentence when two decays' selection probabilities (nearly) agree on this view, else ""."""
    if agreement is None or not agreement.max_rel < SAME_DECAY_REL:
        return ""
    a, b = agreement.far
    far = f"both are {_sci(a)}" if _sci(a) == _sci(b) else f"they are {_sci(a)} and {_sci(b)}"
    near = agreement.max_rel_near
    near_text = f"{100 * near:.2g} %" if near >= 5e-5 else "less than 0.005 %"
    return (
        f"**{names[0]} and {names[1]} agree here.** At K = {n_records:,} (γ = {fmt_m(1000 * agreement.gamma_km)}) "
        f"their selection probabilities differ by at most {near_text} below γ and {far} beyond it, so the "
        "exponential and logistic decays draw (nearly) the same anchors and give (nearly) the same mechanism."
    )


def class_as_attacker_sentence(row: dict) -> str:
    """The class as one attacker, after a shared-place round (``row``: the round's row of the host view, with the
    summary's ``pooled_*`` and ``resend_*`` numbers of :func:`panda.class_round.pooled_attacker`)."""
    n_all, n_first = int(row["pooled_n_reports"]), int(row["resend_n_reports"])
    eps = float(row["epsilon_per_km"])
    return (
        f"**The class as one attacker.** {n_first} phones sent {n_all} reports of the same place: together they "
        f"spend {n_all} × ε = **{n_all * eps:g}/km**. Pooled, the Bayes attacker's guess lands "
        f"**{fmt_m(row['pooled_error_m'])}** from it (blue ring), against {fmt_m(row.get('bayes_mean_m'))} on "
        f"average from one phone's reports. With the re-send defence (each phone repeats its first report) the class "
        f"pools {n_first} reports, not {n_all}: its guess lands {fmt_m(row['resend_error_m'])} away."
    )


def scope_lines(at_a: tuple[float, float], city: tuple[float, float], loss_short: str) -> str:
    """The Lesson's numbers by scope (two markdown lines, short enough for the first screen): *at A* and *city
    average*, each with the report's error (under the loss, named) and the best attacker's error; ``at_a`` and
    ``city`` are (report's, attacker's), m."""
    return (
        f"**At A:** report's error {fmt_m(at_a[0])}, attacker's {fmt_m(at_a[1])}  \n"
        f"**City average:** report's error {fmt_m(city[0])}, attacker's {fmt_m(city[1])} "
        f"(report's error: {loss_short})"
    )
