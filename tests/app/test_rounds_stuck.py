"""A round whose server stopped mid-scoring is scored again from the lecturer's page (issue 38).

The reveal claims the round in the database ("scoring", stamped) and scores with no transaction open. A server
killed in between leaves the claim behind: the round stays "scoring", guesses are refused, and the lecturer's page
offered *Reveal* only for an open round, so the class's guesses were lost. Here a real process claims the
scoring and is killed (SIGKILL) while it scores; once the claim is older than any scoring can take, the host page
offers to score the round, and every guess is scored. While the claim is fresh, nothing is offered: two servers
never score one round.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta

import numpy as np
import pytest
from apptest_support import SMALL, clear_caches, make_app, release_resources, run_ok  # noqa: F401
from conftest import ROOT
from sqlalchemy import select, update

from app.game import rounds
from app.model.params import Params
from app.server.db import store
from app.server.db.models import Entry, Game, Round
from panda import class_round

pytestmark = pytest.mark.slow

#: A server's reveal that never gets past the scoring: it says so in a file, then waits to be killed.
DYING_SERVER = textwrap.dedent(
    """
    import pathlib, sys, time
    from app.game import rounds

    code, key, flag = sys.argv[1:4]

    def score(spec, entries):
        pathlib.Path(flag).write_text(str(len(entries)))
        time.sleep(600)

    rounds.reveal(code, key, score)
    """
)


def _view() -> list:
    params = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), page_loss="road")
    return list(params.instance_key)


def _page_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def _kill_mid_scoring(code: str, key: str, db_url: str, tmp_path) -> None:
    flag = tmp_path / "scoring"
    env = dict(os.environ, PANDA_DB_URL=db_url, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", DYING_SERVER, code, key, str(flag)], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, "the server process ended before it scored"
            assert time.monotonic() < deadline, "the server process never started scoring"
            time.sleep(0.1)
    finally:
        proc.kill()  # SIGKILL: no except clause, no finally of the reveal runs, as with a server that dies
        proc.wait()


def _entries(code: str) -> list[Entry]:
    with store.session(read=True) as s:
        game = s.scalars(select(Game).where(Game.code == code)).one()
        rnd = s.scalars(select(Round).where(Round.game_id == game.id)).one()
        return list(s.scalars(select(Entry).where(Entry.round_id == rnd.id).order_by(Entry.id)))


def test_a_round_whose_server_died_mid_scoring_is_scored_from_the_lecturers_page(db, tmp_path):
    from app import state

    view = _view()
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0))
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    rng = np.random.default_rng(3)
    tokens = [rounds.join(code) for _ in range(4)]
    for i, t in enumerate(tokens):
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 1, None, rng=rng))
        if i < 3:  # one student does not guess
            rounds.guess(code, t, 15 * i + 2)

    _kill_mid_scoring(code, key, db, tmp_path)
    assert rounds.status(code)[:2] == (1, "scoring")

    # A fresh claim may be a server still scoring: the page says so and offers no second scoring.
    at = make_app("app_pages/host.py", code=code, key=key)
    run_ok(at)
    labels = [b.label for b in at.button]
    assert "Score the guesses" not in labels and "Reveal" not in labels, labels
    assert "being scored" in _page_text(at)

    # Once the claim is older than any scoring can take, its server is gone: the page offers to score.
    with store.session() as s:
        stamp = s.scalars(select(Round.revealed_at).where(Round.game.has(code=code))).one()
        s.execute(
            update(Round)
            .where(Round.game.has(code=code))
            .values(revealed_at=stamp - rounds.SCORING_STALE - timedelta(seconds=1))
        )
    at = make_app("app_pages/host.py", code=code, key=key)
    run_ok(at)
    assert "stopped before it finished" in _page_text(at)
    next(b for b in at.button if b.label == "Score the guesses").click()
    run_ok(at)
    assert not at.warning, [w.value for w in at.warning]

    current = rounds.host_view(code, key).current
    assert current["status"] == "revealed" and current["n_guesses"] == 3 and current["n_players"] == 4
    entries = _entries(code)
    assert len(entries) == 4
    assert [e.guess_place for e in entries] == [2, 17, 32, None]  # every guess kept
    assert all(e.error_m is not None and e.rank is not None for e in entries[:3])
    assert all(e.bayes_place is not None and e.bayes_error_m is not None for e in entries)
    d = inst.d_km * 1000.0
    assert [e.error_m for e in entries[:3]] == pytest.approx([d[e.guess_place, e.secret_place] for e in entries[:3]])
    # The phones get their scores.
    phone = make_app("app_pages/play.py", code=code, me=tokens[0])
    run_ok(phone)
    assert "Revealed" in _page_text(phone)
