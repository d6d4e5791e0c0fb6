"""The class round's pages in AppTest: started from the presenter view, hostile links, the reveal.

The whole round with phones in a real browser is tests/browser/test_browser_game.py; here every page runs in
process against its own SQLite file, and links are typed by hand (forged keys and tokens, markup).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from apptest_support import SMALL, clear_caches, make_app, metric, release_resources, run_ok  # noqa: F401
from conftest import LECTURER_KEY

from app.game import rounds
from app.model.params import Params
from app.server import lecturer
from panda import class_round

pytestmark = pytest.mark.slow


def _view() -> list:
    params = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), page_loss="road")
    return list(params.instance_key)


def _page_text(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info]
    return "\n".join(str(p) for p in parts)


def test_the_presenter_starts_a_round_on_the_lessons_view(db):
    at = make_app(present="1", lecturer=LECTURER_KEY)
    run_ok(at)
    at.radio(key="lesson_round_secret").set_value("shared")
    next(b for b in at.button if b.label == "Start a round").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    code = at.query_params["code"]
    assert "key" not in at.query_params and "lecturer" not in at.query_params  # the projected address: no key
    assert len(code) == rounds.CODE_LENGTH
    assert [b for b in at.button if b.label == "Reveal"]  # the lecturer's session controls the round
    hv = rounds.host_view(code, lecturer.round_token(code))
    assert hv.current["mechanism"] == "laplace" and hv.current["secret_mode"] == "shared"
    assert hv.view == list(Params(n_records=200, n_users=12, n_outputs=50, page_loss="road").instance_key)
    assert "Class round 1" in _page_text(at)
    assert metric(at, "Players") == "0"


def test_the_lecturers_page_needs_the_lecturers_key(db):
    """A forged or cut key gets the room's view: the join code and the guesses, no control."""
    code, key = rounds.open_game(_view(), rounds.RoundSpec("laplace", 5.0))
    for bad in ("", "forged", key[:-1]):
        at = make_app("app_pages/host.py", code=code, key=bad)
        run_ok(at)
        assert "key" not in at.query_params
        assert not {"Reveal", "End round", "Play again"} & {b.label for b in at.button}
        assert not at.get("download_button")
        assert metric(at, "Players") == "0"


@pytest.mark.parametrize(
    "query",
    [
        {"code": "[Session expired](https://example.invalid/login)"},
        {"code": "ZZZZZZ", "me": "x"},
        {"code": "<img src=https://example.invalid/a.png>", "me": "y" * 5000},
        {"code": "A" * 10_000},
        {"me": "token-without-code"},
    ],
)
def test_a_hostile_student_link_gets_a_sentence(db, query):
    at = make_app("app_pages/play.py", **query)
    run_ok(at)
    text = _page_text(at)
    assert "example.invalid" not in text and "<img" not in text
    if query.get("me"):
        assert at.error and len(at.error[0].value) < 200
    else:
        assert [b for b in at.button if b.label == "Join"]


def test_a_student_joins_then_reloads_into_the_same_round(db):
    rounds.open_game(_view(), rounds.RoundSpec("laplace", 5.0, 2, "each"))
    code, _ = rounds.open_game(_view(), rounds.RoundSpec("laplace", 5.0, 2, "each"))
    at = make_app("app_pages/play.py", code=code.lower())
    run_ok(at)
    next(b for b in at.button if b.label == "Join").click()
    at.run()
    assert not at.exception
    me = at.query_params["me"]
    assert at.query_params["code"] == code
    assert "Round 1" in _page_text(at) and "Tap the place" in _page_text(at)
    first = rounds.player_view(code, me, None)  # drawn already: ``draw`` is not called again
    # A reload of the same link: the same player, the same reports.
    again = make_app("app_pages/play.py", code=code, me=me)
    run_ok(again)
    assert "player 1" in _page_text(again)
    assert rounds.player_view(code, me, None).reports == first.reports and len(first.reports) == 2


def test_the_reveal_from_the_lecturers_page(db):
    from app import state

    view = _view()
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0))
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    rng = np.random.default_rng(0)
    tokens = [rounds.join(code) for _ in range(3)]
    for i, t in enumerate(tokens):
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 1, None, rng=rng))
        rounds.guess(code, t, 10 * i)
    at = make_app("app_pages/host.py", code=code, key=key)  # an address of before the lecturer key
    run_ok(at)
    assert "key" not in at.query_params  # into the session, out of the address
    assert metric(at, "Guesses") == "3" and metric(at, "Players") == "3"
    next(b for b in at.button if b.label == "Reveal").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    summary = rounds.host_view(code, key).current
    assert summary["status"] == "revealed" and summary["n_guesses"] == 3
    from app.model.panda_numbers import fmt_m

    assert metric(at, "Class: median") == fmt_m(summary["class_median_m"])
    assert metric(at, "Bayes attacker (expected)") == fmt_m(summary["bayes_expected_m"])
    # A guess after the reveal is refused; the student's page shows their score instead.
    with pytest.raises(rounds.GameError, match="revealed"):
        rounds.guess(code, tokens[0], 3)
    phone = make_app("app_pages/play.py", code=code, me=tokens[0])
    run_ok(phone)
    assert "Revealed" in _page_text(phone)


def test_the_lecturers_page_keeps_the_databases_own_words_to_the_log(db, monkeypatch, caplog):
    """Anyone can open /host: a database failure is a sentence there, its text (tables, paths, SQL) only in the log."""
    secret_words = "no such table: games [SQL: SELECT games.secret_key FROM games WHERE /srv/class.db]"

    def broken(*_args, **_kwargs):
        raise RuntimeError(secret_words)

    monkeypatch.setattr(rounds, "host_view", broken)
    at = make_app("app_pages/host.py", code="K7M2QX", key="anything")
    run_ok(at)
    shown = _page_text(at)
    assert "could not be read" in shown and "secret_key" not in shown and "RuntimeError" not in shown
    assert secret_words in caplog.text


def test_the_projector_shows_the_class_as_one_attacker_after_a_shared_round(db):
    """After a shared round with k = 2, the room's view (no controls) states the pooled attacker with the
    summary's numbers, and the map draws its guess (the blue ring's tooltip)."""
    from app import state
    from app.model.lesson_numbers import class_as_attacker_sentence

    view = _view()
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0, 2, "shared", 5))
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    rng = np.random.default_rng(0)
    for i, t in enumerate([rounds.join(code) for _ in range(4)]):
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 2, 5, rng=rng))
        rounds.guess(code, t, 20 * i)
    rounds.reveal(
        code,
        key,
        lambda rnd, entries: class_round.score_round(
            inst.prior, matrix, inst.d_km * 1000.0, entries, rnd.n_reports, rng=np.random.default_rng(1)
        ),
    )
    current = rounds.host_view(code, key).current
    assert current["pooled_n_reports"] == 8 and current["resend_n_reports"] == 4
    room = make_app("app_pages/host.py", code=code, room="1")
    run_ok(room)
    sentence = class_as_attacker_sentence(current)
    assert sentence in _page_text(room)
    assert f"8 × ε = **{8 * 5.0:g}/km**" in sentence
    deck = json.loads(room.get("deck_gl_json_chart")[0].proto.json)
    marks = next(layer for layer in deck["layers"] if layer["id"] == "guesses")["data"]
    assert any(m["tooltip"].startswith("The class as one attacker") for m in marks)


def test_one_question_for_the_room_is_the_default_round(db):
    at = make_app(present="1", lecturer=LECTURER_KEY)
    run_ok(at)
    assert at.radio(key="lesson_round_secret").value == "question"
    next(b for b in at.button if b.label == "Start a round").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    code = at.query_params["code"]
    assert rounds.host_view(code, lecturer.round_token(code)).current["secret_mode"] == "question"
    assert "one question for the room" in _page_text(at)


def test_the_lecturer_asks_for_a_second_vote_and_starts_a_timer_from_the_host_page(db):
    """The host page's Vote again and Timer buttons: the projector (the room's view) then shows the timer and the
    second vote's line; the reveal shows both votes' errors."""
    from app import state

    view = _view()
    code, key = rounds.open_game(view, rounds.RoundSpec("laplace", 5.0, 1, "question", 3))
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    tokens = [rounds.join(code) for _ in range(3)]
    for i, t in enumerate(tokens):
        rounds.player_view(
            code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 1, 3, rng=np.random.default_rng(0))
        )
        rounds.guess(code, t, 40 + i)
    at = make_app("app_pages/host.py", code=code, key=key)
    run_ok(at)
    next(b for b in at.button if b.label == "Vote again").click()
    at.run()
    next(b for b in at.button if b.label.startswith("Timer")).click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert next(b for b in at.button if b.label == "Vote again").disabled
    rounds.guess(code, tokens[0], 3)  # one student changes their mind
    room = make_app("app_pages/host.py", code=code, room="1")
    run_ok(room)
    text = _page_text(room)
    assert "s left" in text and "**Second vote**: 1 of the first vote's 3 guesses changed" in text
    next(b for b in at.button if b.label == "Reveal").click()
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert "**Two votes.**" in _page_text(at) and "1 student changed their guess" in _page_text(at)
