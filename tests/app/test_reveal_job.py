"""Nothing heavy in the web server process (issue 29): a class round's reveal scores the guesses
(``panda.class_round.score_round``, about 1 s at K = 500) in a job on a Dask worker.

The lecturer's page draws the seed in the server (``secrets.randbits(64)``); the test records the seed it drew,
poisons ``score_round`` in this (the server's) process, reveals from the page, and checks that the stored scores
equal a direct ``score_round`` call with the same seed.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest

pytest.importorskip("streamlit")

from apptest_support import SMALL, clear_caches, make_app, release_resources, run_ok  # noqa: E402, F401
from sqlalchemy import select  # noqa: E402

from app.game import rounds  # noqa: E402
from app.model.params import Params  # noqa: E402
from app.server.db import models, store
from panda import class_round

pytestmark = pytest.mark.slow


def _poisoned(*_args, **_kwargs):
    msg = "the class round was scored in the web server process"
    raise AssertionError(msg)


def _entries(code: str) -> list[models.Entry]:
    with store.session(read=True) as s:
        game = s.scalar(select(models.Game).where(models.Game.code == code))
        rnd = s.scalar(select(models.Round).where(models.Round.game_id == game.id).order_by(models.Round.number.desc()))
        entries = list(s.scalars(select(models.Entry).where(models.Entry.round_id == rnd.id).order_by(models.Entry.id)))
        s.expunge_all()
        return entries


def test_the_reveal_is_scored_on_a_worker_with_the_servers_seed(db, monkeypatch):
    from app import state

    view = list(
        Params(
            n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), page_loss="road"
        ).instance_key
    )
    n_reports = 3  # more than one report: the Bayes attacker's expected error is sampled (the seed matters)
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0, n_reports, "each"))
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    rng = np.random.default_rng(7)
    tokens = [rounds.join(code) for _ in range(4)]
    for i, t in enumerate(tokens):
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, n_reports, None, rng=rng))
        if i < 3:  # one student does not guess
            rounds.guess(code, t, 20 * i + 1)

    real_score, real_randbits = class_round.score_round, secrets.randbits
    drawn: list[int] = []

    def randbits(k: int) -> int:
        value = real_randbits(k)
        if k == 64:
            drawn.append(value)
        return value

    state.panda_worker()  # the workers are processes of their own: the poison below stays in this one
    with monkeypatch.context() as poison:
        poison.setattr(secrets, "randbits", randbits)
        poison.setattr(class_round, "score_round", _poisoned)
        at = make_app("app_pages/host.py", code=code, key=key)
        run_ok(at)
        next(b for b in at.button if b.label == "Reveal").click()
        run_ok(at)
    assert not at.warning, [w.value for w in at.warning]
    assert len(drawn) == 1  # one seed, drawn by the server for this reveal

    current = rounds.host_view(code, key).current
    assert current["status"] == "revealed" and current["n_guesses"] == 3 and current["n_players"] == 4
    stored = _entries(code)
    entries = [{"secret": e.secret_place, "reports": list(e.reports), "guess": e.guess_place} for e in stored]
    scored, summary = real_score(
        inst.prior, matrix, inst.d_km * 1000.0, entries, n_reports, rng=np.random.default_rng(drawn[0])
    )
    got = [
        {"error_m": e.error_m, "bayes_place": e.bayes_place, "bayes_error_m": e.bayes_error_m, "rank": e.rank}
        for e in stored
    ]
    assert got == scored
    for name, value in summary.items():
        if name != "best_index":
            assert current[name] == value, name
    assert current["bayes_expected_m"] > 0.0
    # Another seed gives another sampled expectation: the stored one is the seed's, not a fixed draw's.
    _, other = real_score(inst.prior, matrix, inst.d_km * 1000.0, entries, n_reports, rng=np.random.default_rng(1))
    assert other["bayes_expected_m"] != current["bayes_expected_m"]
