"""The planner page's words and rows: a :class:`panda.plan.PlanResult` as the sentence, the table and the places'
columns a stakeholder forwards.

Pure Python and numpy (no streamlit, no plotting): the page, its downloads and the tests call these. Every number
comes from the plan; nothing here computes privacy or error itself beyond naming and rounding.
"""

from __future__ import annotations

import math

import numpy as np

from app.model.panda_numbers import fmt_m, fmt_pct
from panda.plan import MechanismPlan, PlanResult

__all__ = [
    "PLAN_METHODS",
    "LOSS_WORDS",
    "fmt_eps",
    "answer_sentence",
    "best_plan",
    "table_rows",
    "audit_words",
    "place_columns",
    "worst_off",
]

#: The mechanisms the page plans, with their names (the optimal LP only on request: it takes minutes).
PLAN_METHODS: dict[str, str] = {"laplace": "Planar Laplace", "em": "Exponential (EM)", "lp": "Optimal LP"}
#: What the expected error measures under each loss (the sentence says it).
LOSS_WORDS = {
    "straight": "straight-line distance",
    "road": "road distance",
    "task": "the paper's task cost (a detour to a task)",
}


def fmt_eps(value: float) -> str:
    """A budget per km: three significant digits, '—' for none."""
    if value is None or not math.isfinite(value):
        return "—"
    if value >= 100:  # a day's budget: 1,106/km, not 1.11e+03/km
        return f"{value:,.0f}/km"
    return f"{value:.3g}/km"


def best_plan(result: PlanResult) -> MechanismPlan | None:
    """The plan that leaves the attacker the largest error (the most protective way to meet the target), or None.

    A smaller eps is more private for one mechanism, not across mechanisms: the attacker's error compares them.
    """
    met = [m for m in result.mechanisms if math.isfinite(m.epsilon_per_km) and math.isfinite(m.adversary_error_m)]
    return max(met, key=lambda m: m.adversary_error_m) if met else None


def _why_none(result: PlanResult) -> str:
    loss = LOSS_WORDS.get(result.loss, result.loss)
    if result.target_loss_m < result.reachable_m:
        return (
            f"No mechanism can keep the expected error within {fmt_m(result.target_loss_m)} ({loss}) on this view: "
            f"even reporting every place as its nearest output costs {fmt_m(result.reachable_m)} on average. "
            "Accept a larger error, or choose more outputs (M) in the sidebar."
        )
    hi = result.grid_per_km[-1]
    return (
        f"No planned mechanism keeps the expected error within {fmt_m(result.target_loss_m)} ({loss}) at any ε up to "
        f"{fmt_eps(hi)}: accept a larger error."
    )


def answer_sentence(result: PlanResult) -> str:
    """The page's answer in one sentence (markdown: bold on the choice), computed from ``result``."""
    best = best_plan(result)
    if best is None:
        return _why_none(result)
    loss = LOSS_WORDS.get(result.loss, result.loss)
    day = ""
    if result.reports_per_day > 1:
        k, day_eps = result.reports_per_day, fmt_eps(best.epsilon_day_per_km)
        day = f" With {k:,} reports a day that is a budget of {day_eps} a day"
        if best.day is not None:
            day += (
                f": after a day the attacker's guess is {fmt_m(best.day.error_m[-1])} from the place, unless the "
                f"device re-sends its first report ({fmt_m(best.day.defence_error_m[-1])})"
            )
        day += "."
    return (
        f"To keep the expected error within **{fmt_m(result.target_loss_m)}** ({loss}), the most protective choice "
        f"here is **{PLAN_METHODS.get(best.method, best.method)} at ε = {fmt_eps(best.epsilon_per_km)}**: a report "
        f"then lands {fmt_m(best.loss_m)} from the true place on average, and the best attacker's guess "
        f"{fmt_m(best.adversary_error_m)} from it.{day}"
    )


def _day_text(plan: MechanismPlan) -> tuple[str, str]:
    """The attacker after a day of reports (with its standard error) and under the re-send defence."""
    if plan.day is None:
        return "—", "—"
    err, se = plan.day.error_m[-1], plan.day.stderr_m[-1]
    after = fmt_m(err) if se == 0 else f"{fmt_m(err)} ± {se:,.0f} m"
    return after, fmt_m(plan.day.defence_error_m[-1])


def table_rows(result: PlanResult) -> list[dict]:
    """One row per planned mechanism, the column names with their units."""
    rows = []
    for plan in result.mechanisms:
        risk = plan.risk
        after, defence = _day_text(plan)
        row = {
            "mechanism": PLAN_METHODS.get(plan.method, plan.method),
            "answer": plan.outcome,
            "ε (1/km)": plan.epsilon_per_km,
        }
        if result.reports_per_day > 1:
            row["ε a day (1/km)"] = plan.epsilon_day_per_km
        row["expected error (m)"] = plan.loss_m
        row["attacker's error (m)"] = plan.adversary_error_m
        for r, chance in zip(risk.radii_m if risk else (), risk.chance_within if risk else (), strict=True):
            row[f"attacker within {r:,.0f} m"] = fmt_pct(chance)
        row["worst-off 10 %: attacker's error (m)"] = risk.worst_share_error_m if risk else math.nan
        if result.reports_per_day > 1:
            row[f"attacker after {result.reports_per_day:,} reports"] = after
            row["with the re-send defence"] = defence
        row["exact audit"] = audit_words(plan)
        if plan.method == "lp" and math.isfinite(plan.epsilon_low_per_km):
            row["certified: impossible at or below"] = fmt_eps(plan.epsilon_low_per_km)
        rows.append(row)
    return rows


def audit_words(plan: MechanismPlan) -> str:
    """The exact eps-mDP audit of the planned matrix in words."""
    if plan.audit_passed is None:
        return "—"
    if plan.audit_passed:
        return "passed: ε-mDP holds for every pair of places"
    return f"fails for {fmt_pct(plan.audit_violation_rate)} of the pairs of places"


def place_columns(result: PlanResult, prior: np.ndarray) -> dict[str, np.ndarray]:
    """The places' columns for the GIS files: the prior, then per planned mechanism the report's and the attacker's
    expected error (metres) and whether the place is among the worst-off 10 % (the attacker's lowest errors)."""
    cols: dict[str, np.ndarray] = {"prior": np.asarray(prior, dtype=float)}
    for plan in result.mechanisms:
        if plan.risk is None or plan.place_loss_m is None:
            continue
        cols[f"{plan.method}_report_error_m"] = np.asarray(plan.place_loss_m, dtype=float)
        cols[f"{plan.method}_attacker_error_m"] = np.asarray(plan.risk.place_error_m, dtype=float)
        cols[f"{plan.method}_worst_off"] = worst_off(plan, prior).astype(np.int32)
    return cols


def worst_off(plan: MechanismPlan, prior: np.ndarray) -> np.ndarray:
    """Places whose attacker's error is at most the worst-off share's threshold (the least protected ones)."""
    if plan.risk is None:
        return np.zeros(np.asarray(prior).size, dtype=bool)
    return np.asarray(plan.risk.place_error_m) <= plan.risk.worst_share_threshold_m
