"""A new round draws a new secret place (issue 38): never the one the class was just shown at the reveal.

In a "place A for everyone" round every phone sees the shared place in orange at the reveal; *Play again* used to
start the next round on that same place, so the class knew the answer. Now the next round's shared place is drawn
afresh from the view's prior, away from every place revealed in the game (and, when the prior has no other place
left, at least away from the last one); a student with a secret of their own never gets their last revealed secret
again. A lecturer may still pick a place explicitly: the host page then says the class has seen it.
"""

from __future__ import annotations

import numpy as np
import pytest
from apptest_support import SMALL, clear_caches, make_app, release_resources, run_ok  # noqa: F401
from pg_fixture import pg_url  # noqa: F401 (fixture)

from app.game import rounds
from app.model.params import Params
from app.server.db import store
from panda import class_round

VIEW = ["city:kotka", 60, 30, 30, 0, "road", 1, "uniform"]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    u = f"sqlite:///{tmp_path / 'class.db'}" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    yield u
    store.dispose(u)


def _two_places(a: int, b: int, n: int = 60) -> np.ndarray:
    prior = np.zeros(n)
    prior[[a, b]] = 0.5
    return prior


def _fake_score(spec, entries):
    scored = [{"error_m": 0.0, "bayes_place": 0, "bayes_error_m": 0.0, "rank": 1} for _ in entries]
    return scored, {"n_players": len(entries), "n_guesses": 0}


def _current(code, key, url) -> dict:
    return rounds.host_view(code, key, url=url).current


def test_play_again_in_shared_mode_draws_a_place_the_class_has_not_seen(url):
    prior = _two_places(7, 42)
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "shared", 42), url=url)
    rounds.reveal(code, key, _fake_score, url=url)  # every phone (and the projector) now shows place 42
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 1, "shared"), prior=prior, url=url)
    cur = _current(code, key, url)
    assert cur["shared_place"] == 7 and cur["seen_in_round"] is None
    rounds.reveal(code, key, _fake_score, url=url)
    # Both places of the prior are known now: the new round at least never repeats the last one, and the
    # lecturer's page is told the class has seen the place it drew.
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 1, "shared"), prior=prior, url=url)
    cur = _current(code, key, url)
    assert cur["shared_place"] == 42 and cur["seen_in_round"] == 1
    # A round ended without a reveal showed nothing: the last place shown is still round 2's, kept out.
    rounds.close_round(code, key, url=url)
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 1, "shared"), prior=prior, url=url)
    assert _current(code, key, url)["shared_place"] == 42


def test_shared_rounds_over_a_uniform_prior_never_repeat_a_revealed_place(url):
    prior = np.full(60, 1 / 60)
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "shared", 0), url=url)
    seen = []
    for _ in range(15):
        rounds.reveal(code, key, _fake_score, url=url)
        seen.append(_current(code, key, url)["shared_place"])
        rounds.next_round(code, key, rounds.RoundSpec("em", 3.0, 1, "shared"), prior=prior, url=url)
        cur = _current(code, key, url)
        assert cur["shared_place"] not in seen and cur["seen_in_round"] is None


def test_a_shared_round_needs_a_place_or_a_prior_to_draw_one(url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "shared", 5), url=url)
    with pytest.raises(ValueError, match="prior"):
        rounds.next_round(code, key, rounds.RoundSpec("em", 3.0, 1, "shared"), url=url)
    with pytest.raises(ValueError):
        rounds.RoundSpec("em", 3.0, 1, "each", 5)
    code2, key2 = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "shared"), prior=_two_places(1, 2), url=url)
    assert _current(code2, key2, url)["shared_place"] in (1, 2)


def test_an_explicit_place_the_class_has_seen_is_flagged_for_the_lecturer(url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "shared", 42), url=url)
    assert _current(code, key, url)["seen_in_round"] is None
    rounds.reveal(code, key, _fake_score, url=url)
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 1, "shared", 42), url=url)  # the lecturer's choice
    assert _current(code, key, url)["seen_in_round"] == 1
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 1, "shared", 42), url=url)  # round 2 never revealed
    assert _current(code, key, url)["seen_in_round"] == 1
    rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 1, "shared", 5), url=url)
    assert _current(code, key, url)["seen_in_round"] is None
    # Nothing secret in the flag before the reveal: the host view's entries still hold no secret.
    assert all("secret" not in e for e in rounds.host_view(code, key, url=url).entries)


def test_a_student_never_gets_their_last_revealed_secret_again(url):
    prior = _two_places(3, 9)
    rng = np.random.default_rng(0)
    asked: list[tuple] = []

    def draw(view, rnd):
        asked.append(tuple(rnd.avoid_places))
        return rounds.draw_place(prior, rnd.avoid_places, rng), [0]

    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    token = rounds.join(code, url=url)
    first = rounds.player_view(code, token, draw, url=url)
    rounds.reveal(code, key, _fake_score, url=url)
    secrets_ = [rounds.player_view(code, token, draw, url=url).secret]
    assert asked == [()]
    for n in range(2, 8):
        rounds.next_round(code, key, rounds.RoundSpec("em", 3.0), url=url)
        rounds.player_view(code, token, draw, url=url)
        assert asked[-1][0] == secrets_[-1]  # the last revealed secret first
        rounds.reveal(code, key, _fake_score, url=url)
        secrets_.append(rounds.player_view(code, token, draw, url=url).secret)
        assert secrets_[-1] != secrets_[-2], (n, secrets_)
    assert first.secret is None


def test_draw_place_keeps_to_the_prior_and_away_from_the_avoided_places():
    rng = np.random.default_rng(1)
    prior = np.array([0.0, 0.2, 0.3, 0.5])
    drawn = {rounds.draw_place(prior, (), rng) for _ in range(200)}
    assert drawn == {1, 2, 3}
    assert {rounds.draw_place(prior, (3, 1), rng) for _ in range(50)} == {2}
    # Every place of the prior avoided: the first one (the last round's) still is.
    assert {rounds.draw_place(prior, (2, 1, 3), rng) for _ in range(50)} == {1, 3}
    assert rounds.draw_place(np.array([0.0, 1.0]), (1,), rng) == 1  # one place only: nothing else to draw


# ---------------------------------------------------------------------------------------------
# The lecturer's page


def _view() -> list:
    params = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), page_loss="road")
    return list(params.instance_key)


def _page_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def _play_round(code: str, key: str, view: list, n_students: int = 2) -> None:
    from app import state

    inst = state.instance(*view)
    cur = rounds.host_view(code, key).current
    matrix = state.baseline(tuple(view), "laplace", float(cur["epsilon_per_km"]), ()).matrix
    rng = np.random.default_rng(cur["round"])
    for i in range(n_students):
        t = rounds.join(code)
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 1, r.shared_place, rng=rng))
        rounds.guess(code, t, 10 * i)

    def score(rnd, entries):
        return class_round.score_round(inst.prior, matrix, inst.d_km * 1000.0, entries, 1, rng=np.random.default_rng(1))

    rounds.reveal(code, key, score)


@pytest.mark.slow
def test_play_again_on_the_lecturers_page_draws_a_new_shared_place(db):
    view = _view()
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0, 1, "shared", 17))
    _play_round(code, key, view)
    at = make_app("app_pages/host.py", code=code, key=key)
    run_ok(at)
    next(b for b in at.button if b.label == "Play again").click()
    run_ok(at)
    assert not at.warning, [w.value for w in at.warning]
    cur = rounds.host_view(code, key).current
    assert cur["round"] == 2 and cur["status"] == "open" and cur["secret_mode"] == "shared"
    assert cur["shared_place"] != 17 and cur["seen_in_round"] is None
    assert "revealed in round" not in _page_text(at)
    # The lecturer may choose the same place again on purpose (the same truth at another ε): the page says the
    # class has seen it.
    second = cur["shared_place"]
    _play_round(code, key, view)
    at = make_app("app_pages/host.py", code=code, key=key)
    run_ok(at)
    at.radio(key="host_next_place").set_value("same")
    next(b for b in at.button if b.label == "Play again").click()
    run_ok(at)
    cur = rounds.host_view(code, key).current
    assert cur["round"] == 3 and cur["shared_place"] == second and cur["seen_in_round"] == 2
    assert "revealed in round 2" in _page_text(at)
