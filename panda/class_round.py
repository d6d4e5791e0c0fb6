"""The class round's numbers: a student's reports, the Bayes attacker on the same reports, the scores.

Pure numpy (no streamlit, no database). Distances are the view's road metric in metres (the instance's
``d_km`` times 1000), the same the Lesson's attacker uses.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from panda.repeated import posterior_after

__all__ = [
    "draw_entry",
    "bayes_guess",
    "expected_bayes_error_m",
    "competition_ranks",
    "pooled_attacker",
    "score_round",
]


def draw_entry(
    matrix: np.ndarray, prior: np.ndarray, n_reports: int, shared_place: int | None, *, rng: np.random.Generator
) -> tuple[int, list[int]]:
    """A student's secret place (the lecturer's, or one drawn from the prior) and k reports drawn from its row."""
    p = np.asarray(matrix, dtype=float)
    if shared_place is None:
        w = np.asarray(prior, dtype=float)
        secret = int(rng.choice(w.size, p=w / w.sum()))
    else:
        secret = int(shared_place)
    row = p[secret]
    reports = rng.choice(row.size, size=int(n_reports), p=row / row.sum())
    return secret, [int(j) for j in reports]


def bayes_guess(prior: np.ndarray, matrix: np.ndarray, reports: Sequence[int], distance_m: np.ndarray) -> int:
    """The Bayes attacker's guess after ``reports``: the place with the least expected distance to the truth."""
    post = posterior_after(prior, matrix, list(reports))
    return int(np.argmin(post @ np.asarray(distance_m, dtype=float)))


def expected_bayes_error_m(
    prior: np.ndarray,
    matrix: np.ndarray,
    secret: int,
    n_reports: int,
    distance_m: np.ndarray,
    *,
    rng: np.random.Generator,
    n_sequences: int = 64,
) -> float:
    """The Bayes attacker's expected error (m) when the truth is ``secret`` and it sees k fresh reports.

    Exact for one report (a sum over the outputs the secret place can report); for k > 1 the mean over
    ``n_sequences`` sampled report sequences.
    """
    p = np.asarray(matrix, dtype=float)
    d = np.asarray(distance_m, dtype=float)
    pr = np.asarray(prior, dtype=float)
    row = p[int(secret)]
    if int(n_reports) == 1:
        ys = np.flatnonzero(row > 0)
        post = pr[:, None] * p[:, ys]
        post /= post.sum(axis=0, keepdims=True)
        guesses = np.argmin(d.T @ post, axis=0)  # (d.T @ post)[g, y] = sum_x post[x, y] d[x, g]
        return float(row[ys] @ d[guesses, int(secret)])
    seqs = rng.choice(row.size, size=(int(n_sequences), int(n_reports)), p=row / row.sum())
    log_p = np.log(np.where(p > 0, p, 1e-300))
    log_post = np.log(np.where(pr > 0, pr, 1e-300))[None, :] + log_p[:, seqs].sum(axis=2).T
    log_post -= log_post.max(axis=1, keepdims=True)
    post = np.exp(log_post)
    post /= post.sum(axis=1, keepdims=True)
    guesses = np.argmin(post @ d, axis=1)
    return float(d[guesses, int(secret)].mean())


def competition_ranks(errors: Sequence[float | None]) -> list[int | None]:
    """Ranks by error, 1 = closest; ties share a rank ("1224"); no guess, no rank."""
    known = sorted(e for e in errors if e is not None)
    return [None if e is None else 1 + sum(1 for f in known if f < e) for e in errors]


def pooled_attacker(prior: np.ndarray, matrix: np.ndarray, distance_m: np.ndarray, entries: Sequence[dict]) -> dict:
    """Pool every student's reports of one shared secret place: the class as one attacker.

    The reports are independent draws from the secret place's row, so the pooled posterior is the product of
    their likelihoods (:func:`panda.repeated.posterior_after`): n students with k reports each spend n·k·ε
    between them. Beside it, the same class under the re-send defence: each phone repeats its first report,
    so the class pools n reports, not n·k (the defence is per phone: different phones still differ).

    Returns ``pooled_n_reports``, ``pooled_place``, ``pooled_error_m``, and ``resend_n_reports``,
    ``resend_place``, ``resend_error_m`` (metres from the secret place).

    Raises
    ------
    ValueError
        When the entries do not share one secret place, or there are none.
    """
    secrets_ = {int(e["secret"]) for e in entries}
    if len(secrets_) != 1:
        msg = f"pooling needs one shared secret place, not {len(secrets_)}"
        raise ValueError(msg)
    secret = secrets_.pop()
    d = np.asarray(distance_m, dtype=float)
    everything = [int(y) for e in entries for y in e["reports"]]
    firsts = [int(e["reports"][0]) for e in entries if len(e["reports"])]
    pooled = bayes_guess(prior, matrix, everything, d)
    resend = bayes_guess(prior, matrix, firsts, d)
    return {
        "pooled_n_reports": len(everything),
        "pooled_place": pooled,
        "pooled_error_m": float(d[pooled, secret]),
        "resend_n_reports": len(firsts),
        "resend_place": resend,
        "resend_error_m": float(d[resend, secret]),
    }


def score_round(
    prior: np.ndarray,
    matrix: np.ndarray,
    distance_m: np.ndarray,
    entries: Sequence[dict],
    n_reports: int,
    *,
    rng: np.random.Generator,
) -> tuple[list[dict], dict]:
    """Score every entry (``secret``, ``reports``, ``guess`` or None, ``first_guess``) and summarise the round.

    Returns
    -------
    (list of dict, dict)
        Per entry: ``error_m`` (None without a guess), ``bayes_place``, ``bayes_error_m``, ``rank``. The summary:
        players, guesses, the class's mean, median and best error, the Bayes attacker's mean error on the
        class's very reports and its expected error from the same secret places (m); when two or more entries
        share one secret place, the class as one attacker too (:func:`pooled_attacker`); after a second vote
        (entries with a ``first_guess``), the first vote's guesses, mean and median error, and how many changed.
    """
    d = np.asarray(distance_m, dtype=float)
    scored = []
    for e in entries:
        g = bayes_guess(prior, matrix, e["reports"], d)
        err = None if e.get("guess") is None else float(d[int(e["guess"]), int(e["secret"])])
        scored.append({"error_m": err, "bayes_place": g, "bayes_error_m": float(d[g, int(e["secret"])])})
    for s, r in zip(scored, competition_ranks([s["error_m"] for s in scored]), strict=True):
        s["rank"] = r
    secrets_ = sorted({int(e["secret"]) for e in entries})
    n_seq = max(16, 4096 // max(len(secrets_), 1))
    expected = {x: expected_bayes_error_m(prior, matrix, x, n_reports, d, rng=rng, n_sequences=n_seq) for x in secrets_}
    errors = [s["error_m"] for s in scored if s["error_m"] is not None]
    guessed = [i for i, s in enumerate(scored) if s["error_m"] is not None]
    best = min(guessed, key=lambda i: scored[i]["error_m"]) if guessed else None
    nan = float("nan")
    summary = {
        "n_players": len(entries),
        "n_guesses": len(errors),
        "class_mean_m": statistics.fmean(errors) if errors else nan,
        "class_median_m": statistics.median(errors) if errors else nan,
        "best_m": scored[best]["error_m"] if best is not None else nan,
        "best_index": best,
        "bayes_mean_m": statistics.fmean(s["bayes_error_m"] for s in scored) if scored else nan,
        "bayes_expected_m": statistics.fmean(expected[int(e["secret"])] for e in entries) if entries else nan,
        "exact_expectation": int(n_reports) == 1,
    }
    firsts = [e for e in entries if e.get("first_guess") is not None]
    if firsts:  # peer instruction's second vote: the first vote's errors, and how many changed their guess
        first_errors = [float(d[int(e["first_guess"]), int(e["secret"])]) for e in firsts]
        summary["first_vote_guesses"] = len(firsts)
        summary["first_vote_mean_m"] = statistics.fmean(first_errors)
        summary["first_vote_median_m"] = statistics.median(first_errors)
        summary["n_changed"] = sum(
            1 for e in firsts if e.get("guess") is not None and int(e["guess"]) != int(e["first_guess"])
        )
    if len(secrets_) == 1 and len(entries) >= 2:  # a shared place: the class as one attacker
        summary.update(pooled_attacker(prior, matrix, d, entries))
    summary = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in summary.items()}
    return scored, summary
