"""The guided lesson's scenes: one idea each, in order, with the question a lecturer asks the room.

A scene is text only (its title, its idea, its question); the live sentence under its control is computed by
the functions below from the view's numbers, so the page and its tests read the same words. The page that
plays the scenes is app/app_pages/guided.py.
"""

from __future__ import annotations

import dataclasses

from app.model.lesson_numbers import doubling_distance_m, times
from app.model.panda_numbers import fmt_m

__all__ = [
    "Scene",
    "SCENES",
    "scene_index",
    "progress_line",
    "promise_sentence",
    "cost_sentence",
    "attacker_sentence",
]


@dataclasses.dataclass(frozen=True)
class Scene:
    """One screen of the guided lesson."""

    key: str  # in the link: ?scene=<key>
    title: str
    idea: str  # what the scene shows, in one or two sentences (markdown)
    question: str  # for the whole room, asked before the control is moved


SCENES: tuple[Scene, ...] = (
    Scene(
        "promise",
        "What ε promises",
        "A phone reports a place drawn at random near where it really is. **ε** says how far apart two places must "
        "be before their reports may tell them apart.",
        "If we halve ε, will place A's reports land closer to A, or further away? Vote, then move ε.",
    ),
    Scene(
        "cost",
        "What a report costs",
        "Privacy is paid for in error: the report lands away from the truth. The orange ring is A's expected "
        "error. Mechanisms spend the same ε differently.",
        "Which mechanism gives place A the smallest error at this ε? Guess before you switch.",
    ),
    Scene(
        "attacker",
        "The attacker",
        "The attacker sees one report, knows the mechanism and where people are, and guesses the likeliest place. "
        "Darker discs: places it believes more.",
        "Will the attacker's guess be closer to A than the report itself? Draw a report and see.",
    ),
    Scene(
        "round",
        "Your turn: guess from a report",
        "Now the room is the attacker: every phone gets a report of a secret place and taps its guess, with the "
        "mechanism and ε of the scenes before.",
        "Where do you think the secret place is? Talk to your neighbour before you tap.",
    ),
    Scene(
        "background",
        "What the attacker knew before",
        "The same mechanism at the same ε, against an attacker who knows where people usually go.",
        "Does knowing where people go break the guarantee, or only help the attacker? Vote, then read the numbers.",
    ),
    Scene(
        "repeated",
        "Many reports from one place",
        "A phone that reports every five minutes sends many reports from the same place. Each one spends ε again.",
        "After 10 reports, is the attacker 10 times closer? Vote, then move k.",
    ),
    Scene(
        "curve",
        "Privacy against error, for every mechanism",
        "Each line is a mechanism: the error its reports cost (up) against ε (right). Lower is more useful at "
        "the same privacy.",
        "Which line would you ship, and at which ε?",
    ),
    Scene(
        "panda",
        "PAnDA's story",
        "PAnDA (CCS 2025) lets each user upload anchor places first, then report. The upload itself can tell places "
        "apart: this scene counts it exactly on this view.",
        "Would you trust a mechanism whose guarantee was checked only on paper?",
    ),
)


def scene_index(key: object) -> int:
    """The index of the scene named ``key`` (from a link: anything), 0 when there is none."""
    for i, scene in enumerate(SCENES):
        if scene.key == key:
            return i
    return 0


def progress_line(index: int) -> str:
    """ "Scene 2 of 8 · What a report costs"."""
    return f"Scene {index + 1} of {len(SCENES)} · {SCENES[index].title}"


def promise_sentence(epsilon_per_km: float, d_ab_m: float, worst_log_ratio: float) -> str:
    """The promise in metres, and what it allows (and what the reports do) for places A and B ``d_ab_m`` apart."""
    eps = float(epsilon_per_km)
    return (
        f"At **ε = {eps:g}/km**, places closer than **{fmt_m(doubling_distance_m(eps))}** look alike: a report is "
        f"at most twice as likely from one as from the other. A and B are {fmt_m(d_ab_m)} apart, so ε allows "
        f"{times(eps * d_ab_m / 1000.0)}; their reports differ by at most **{times(worst_log_ratio)}**."
    )


def cost_sentence(mechanism_label: str, epsilon_per_km: float, error_m: float, loss_label: str) -> str:
    """A's expected error under the shown mechanism, its loss named."""
    return (
        f"With **{mechanism_label}** at ε = {float(epsilon_per_km):g}/km, a report of A costs "
        f"**{fmt_m(error_m)}** on average ({loss_label})."
    )


def attacker_sentence(report_m: float, guess_m: float, city_average_m: float) -> str:
    """One report's distance from A, the attacker's guess's, and the attacker's city-wide average."""
    if guess_m < report_m:
        relation = "closer to A than the report"
    elif guess_m > report_m:
        relation = "further from A than the report"
    else:
        relation = "as far from A as the report"
    return (
        f"The report landed **{fmt_m(report_m)}** from A; the attacker's guess is **{fmt_m(guess_m)}** from A, "
        f"{relation}. Over every place of the city, its guess is {fmt_m(city_average_m)} off "
        "on average."
    )
