"""The planner's brief: one page to forward, as self-contained HTML (and PDF through :mod:`app.model.pdf_print`).

It states the question asked, the answer (eps, mechanism, error, the attacker, the risk), the assumptions (map,
places, loss, prior, reports a day, what the attacker knows), the exact audit in words, the exposure map, the
planner's chart, and the link that reopens the page with its QR code. Pure: the pictures arrive drawn (SVG text),
every number comes from the plan, every text is escaped; nothing in it depends on when it is built except the
date it states, so the same view on the same day gives the same file.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass

import segno

from app.model.panda_numbers import fmt_m, fmt_pct
from app.model.plan_numbers import LOSS_WORDS, PLAN_METHODS, answer_sentence, audit_words, fmt_eps, table_rows
from panda.plan import PlanResult

__all__ = ["BriefView", "brief_html"]

_STYLE = """
@page { size: A4; margin: 14mm; }
body { font-family: "Source Sans Pro", "DejaVu Sans", Arial, sans-serif; color: #1f1f1f; max-width: 48rem;
       margin: 1rem auto; line-height: 1.3; font-size: 9pt; }
h1 { font-size: 1.5rem; margin: 0 0 .1rem; }
h2 { font-size: 1.05rem; margin: .7rem 0 .2rem; border-bottom: 1px solid #ccc; break-after: avoid; }
p, ul { margin: .2rem 0; }
.meta { color: #555; margin: 0 0 .4rem; }
.answer { font-size: 1.1rem; background: #f3f6fa; border-left: 4px solid #0072B2; padding: .4rem .7rem; }
.pictures { display: flex; gap: .8rem; }
.pictures figure { flex: 1 1 0; min-width: 0; }
table { border-collapse: collapse; width: 100%; font-size: 8.5pt; margin-top: .3rem; }
th, td { border: 1px solid #ccc; padding: 3px 5px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
figure { margin: .4rem 0; break-inside: avoid; }
figcaption { color: #555; font-size: 9pt; }
.link { display: flex; gap: 1rem; align-items: center; break-inside: avoid; }
.link a { word-break: break-all; }
svg { max-width: 100%; height: auto; }
"""


@dataclass(frozen=True)
class BriefView:
    """What the brief says about the view besides the plan: its words, its pictures (SVG) and its link."""

    date: str
    place_name: str
    attribution: str
    n_places: int
    n_outputs: int
    prior_words: str
    mapped: str
    map_svg: str
    chart_svg: str
    link: str


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "—" if not math.isfinite(value) else f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return html.escape(str(value))


#: The brief's table: the page's columns without those its sections say in words (the day, the audit).
_BRIEF_COLUMNS = ("mechanism", "ε (1/km)", "ε a day (1/km)", "expected error (m)", "attacker's error (m)")


def _table(result: PlanResult) -> str:
    rows = table_rows(result)
    if not rows:
        return ""
    heads = [h for h in rows[0] if h in _BRIEF_COLUMNS or h.startswith(("attacker within", "worst-off"))]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in heads)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(h, '—'))}</td>" for h in heads) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _question(result: PlanResult) -> str:
    loss = LOSS_WORDS.get(result.loss, result.loss)
    text = f"Keep the expected error of a reported location within {fmt_m(result.target_loss_m)} ({loss})"
    text += f", with {result.reports_per_day:,} report{'s' if result.reports_per_day > 1 else ''} per person a day"
    if result.attacker_floor_m is not None:
        text += f", and leave the best attacker at least {fmt_m(result.attacker_floor_m)} of error"
    return text + ". Which mechanism, at which ε, is the most private way to do it?"


def _risk_items(result: PlanResult) -> str:
    items = []
    for m in result.mechanisms:
        if m.risk is None:
            continue
        name = PLAN_METHODS.get(m.method, m.method)
        chances = ", ".join(
            f"{fmt_pct(c)} within {r:,.0f} m" for r, c in zip(m.risk.radii_m, m.risk.chance_within, strict=True)
        )
        text = (
            f"<b>{html.escape(name)}</b> at ε = {fmt_eps(m.epsilon_per_km)}: the attacker's guess lands {chances} of "
            f"the true place; for the worst-off 10 % of people it errs {fmt_m(m.risk.worst_share_error_m)} on "
            "average."
        )
        if m.day is not None and len(m.day.ks) > 1:
            err, se = m.day.error_m[-1], m.day.stderr_m[-1]
            text += (
                f" After a day of {m.day.ks[-1]:,} independent reports (a budget of {fmt_eps(m.epsilon_day_per_km)}) "
                f"it errs {fmt_m(err)} (± {se:,.0f} m, sampled over {m.day.n_sequences:,} days); if the device "
                f"re-sends its first report instead, {fmt_m(m.day.defence_error_m[-1])}."
            )
        items.append(f"<li>{text}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else "<p>No planned mechanism meets the error.</p>"


def _assumptions(result: PlanResult, view: BriefView) -> str:
    planned = ", ".join(PLAN_METHODS.get(m.method, m.method) for m in result.mechanisms)
    items = [
        f"Map: {html.escape(view.place_name)}, {html.escape(view.attribution)}; {view.n_places:,} places people "
        f"may be at, {view.n_outputs:,} places a report may name.",
        f"Where people are (the prior, which the attacker knows too): {html.escape(view.prior_words)}.",
        f"Error: {html.escape(LOSS_WORDS.get(result.loss, result.loss))} from the true place to the reported one, "
        "averaged over the people.",
        f"Reports: {result.reports_per_day:,} a day, each drawn afresh; the budgets of independent reports add up "
        "(sequential composition).",
        "The attacker knows the mechanism and the prior and makes the guess with the least expected error (Bayes).",
        f"Mechanisms planned: {html.escape(planned)}; ε is searched from {fmt_eps(result.grid_per_km[0])} to "
        f"{fmt_eps(result.grid_per_km[-1])} on a grid whose neighbours are at most 5 % apart.",
        f"No mechanism over these places can do better than {fmt_m(result.reachable_m)} of expected error (each "
        "place reported as its nearest possible report).",
    ]
    return "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"


def _audit(result: PlanResult) -> str:
    items = [
        f"<li><b>{html.escape(PLAN_METHODS.get(m.method, m.method))}</b>: {html.escape(audit_words(m))}"
        + (
            f"; certified: no ε-mDP mechanism over these places meets the error at ε = "
            f"{fmt_eps(m.epsilon_low_per_km)} or below."
            if m.method == "lp" and math.isfinite(m.epsilon_low_per_km) and m.outcome == "met"
            else "."
        )
        + "</li>"
        for m in result.mechanisms
    ]
    return (
        "<p>Each planned mechanism's matrix was checked exactly, pair of places by pair of places, against ε-mDP "
        "(metric differential privacy: two places d km apart may change the chance of any report by at most a "
        "factor e^(ε·d)).</p><ul>" + "".join(items) + "</ul>"
    )


def _answer_html(result: PlanResult) -> str:
    text = html.escape(answer_sentence(result))
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)


def brief_html(result: PlanResult, view: BriefView) -> str:
    """The brief as one self-contained HTML page (no outside request: the pictures and the QR code inline)."""
    qr = segno.make(view.link, error="m").svg_inline(scale=2, dark="#1f1f1f")
    target = fmt_m(result.target_loss_m)
    mapped = PLAN_METHODS.get(view.mapped, view.mapped)
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Location privacy brief: which ε for {target}?</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>Which ε for an expected error of {target}?</h1>
<p class="meta">A brief from PAnDA Explorer, {html.escape(view.date)} · {html.escape(view.place_name)}</p>
<h2>The question</h2>
<p>{html.escape(_question(result))}</p>
<h2>The answer</h2>
<p class="answer">{_answer_html(result)}</p>
{_table(result)}
<h2>What the attacker learns</h2>
{_risk_items(result)}
<h2>Assumptions</h2>
{_assumptions(result, view)}
<h2>The audit</h2>
{_audit(result)}
<h2>Where people are least protected, and the planner's search</h2>
<div class="pictures">
<figure>{view.map_svg}<figcaption>{html.escape(mapped)}: each place coloured by the attacker's expected error there
(darker: the attacker guesses closer); ringed: the worst-off 10 %.</figcaption></figure>
<figure>{view.chart_svg}<figcaption>Expected error against ε for every ε the planner tried; the large dots are the
answers.</figcaption></figure>
</div>
<h2>Reopen it</h2>
<div class="link">{qr}<p>The same view and question on the dashboard:<br>
<a href="{html.escape(view.link)}">{html.escape(view.link)}</a></p></div>
</body>
</html>
"""
