"""The lecturer's controls apart from the projected screen (issue 39, item 5).

* The lecturer key (app/server/lecturer.py): ``PANDA_LECTURER_KEY``, else a random key in a 0600 file that the
  server prints when it starts; a round's token derives from it, so any device that knows the key controls
  the rounds it opened.
* Whoever opens the projected address (``/host?code=...``: it carries no key) gets the room's view: the join
  code, the players and guesses, and the secrets only once revealed; never Reveal, End, Play again or the CSV.
* The lecturer's phone signs in on that same address and controls the round; the projector's ``&room=1`` page
  never shows a control, even in the lecturer's own session.
* The presenter view's *Start a round* and *Prepare* ask for the key; ``?lecturer=KEY`` signs in once and leaves
  the address; wrong keys are counted.
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from apptest_support import SMALL, clear_caches, make_app, metric, release_resources, run_ok  # noqa: F401
from conftest import LECTURER_KEY

from app.game import rounds
from app.model.params import Params
from app.server import lecturer
from app.widgets import lecturer_sign_in
from panda import class_round
from panda.network import folders

pytestmark = pytest.mark.slow
CONTROLS = {"Reveal", "End round", "Play again", "Score the guesses"}


def _view() -> list:
    params = Params(n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), page_loss="road")
    return list(params.instance_key)


def _labels(at) -> set[str]:
    return {b.label for b in at.button}


def _round_with_guesses(n: int = 3, shared: int | None = 7) -> tuple[str, list[str]]:
    """A shared round opened by the lecturer key, ``n`` students who each guessed."""
    from app import state

    view = _view()
    spec = rounds.RoundSpec("laplace", 5.0, 1, "shared" if shared is not None else "each", shared)
    code, _ = rounds.open_game(view, spec, host_token_for=lecturer.round_token)
    inst = state.instance(*view)
    matrix = state.baseline(tuple(view), "laplace", 5.0, ()).matrix
    rng = np.random.default_rng(0)
    tokens = [rounds.join(code, address=f"192.0.2.{i + 1}") for i in range(n)]
    for i, t in enumerate(tokens):
        rounds.player_view(code, t, lambda v, r: class_round.draw_entry(matrix, inst.prior, 1, shared, rng=rng))
        rounds.guess(code, t, 10 * i)
    return code, tokens


# ---------------------------------------------------------------------------------------------
# The key


def test_the_key_file_is_private_made_once_and_derives_each_rounds_token(tmp_path, monkeypatch):
    monkeypatch.delenv(lecturer.LECTURER_KEY_ENV, raising=False)
    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path / "cache")
    key = lecturer.lecturer_key()
    path = lecturer.key_file()
    assert len(key) >= lecturer.MIN_KEY_LENGTH and path.read_text().strip() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert lecturer.lecturer_key() == key  # another server of this machine, or a restart: the same key
    assert lecturer.is_lecturer_key(key) and not lecturer.is_lecturer_key(key[:-1]) and not lecturer.is_lecturer_key("")
    token = lecturer.round_token("K7M2QX")
    assert token == lecturer.round_token("K7M2QX") != lecturer.round_token("K7M2QY")
    monkeypatch.setenv(lecturer.LECTURER_KEY_ENV, "another-key-set-by-hand")
    assert lecturer.lecturer_key() == "another-key-set-by-hand"
    assert lecturer.round_token("K7M2QX") != token  # another key controls other rounds


def test_a_short_key_set_by_hand_is_refused_with_a_sentence(monkeypatch):
    monkeypatch.setenv(lecturer.LECTURER_KEY_ENV, "1234")
    with pytest.raises(ValueError, match="at least"):
        lecturer.lecturer_key()
    at = make_app(present="1")
    run_ok(at)
    at.text_input(key="prepare_lecturer_key").set_value("1234").run()
    assert any("no usable lecturer key" in w.value for w in at.warning)
    assert "Prepare" not in _labels(at)


def test_the_server_prints_where_the_key_is(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(lecturer.LECTURER_KEY_ENV, raising=False)
    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path / "cache")
    monkeypatch.setattr(lecturer, "_announced", False)
    lecturer.announce()
    lecturer.announce()  # once per process
    err = capsys.readouterr().err
    assert err.count("lecturer key:") == 1 and lecturer.lecturer_key() in err


# ---------------------------------------------------------------------------------------------
# The projected address, a student, the lecturer's phone


def test_the_projected_address_shows_the_room_no_control(db):
    code, _ = _round_with_guesses()
    student = make_app("app_pages/host.py", code=code)  # what a student reads off the projector
    run_ok(student)
    assert not CONTROLS & _labels(student) and not student.get("download_button")
    assert metric(student, "Players") == "3" and metric(student, "Guesses") == "3"
    room = rounds.room_view(code)
    assert room.current["shared_place"] is None  # nothing about the secret before the reveal
    assert all("secret" not in e for e in room.entries)
    with pytest.raises(rounds.GameError, match="Only the lecturer"):
        rounds.reveal(code, "guessed", lambda *a: ([], {}))


def test_the_lecturers_phone_reveals_and_the_room_sees_it(db):
    code, _ = _round_with_guesses()
    phone = make_app("app_pages/host.py", code=code)
    run_ok(phone)
    assert not CONTROLS & _labels(phone)
    phone.text_input(key="host_lecturer_key").set_value(LECTURER_KEY).run()
    assert not phone.exception, [e.message for e in phone.exception]
    assert {"Reveal", "End round"} <= _labels(phone)
    next(b for b in phone.button if b.label == "Reveal").click()
    phone.run()
    assert not phone.exception, [e.message for e in phone.exception]
    assert rounds.room_view(code).current["status"] == "revealed"
    assert "Play again" in _labels(phone)

    projector = make_app("app_pages/host.py", code=code, room="1", lecturer=LECTURER_KEY)  # signed in, room page
    run_ok(projector)
    assert not CONTROLS & _labels(projector) and not projector.get("download_button")
    assert metric(projector, "Class: median") == metric(phone, "Class: median")
    room = rounds.room_view(code)
    assert room.current["shared_place"] == 7 and all("secret" in e for e in room.entries)  # revealed: shown


def test_wrong_keys_are_counted_and_then_refused(db):
    code, _ = _round_with_guesses(n=1)
    at = make_app("app_pages/host.py", code=code)
    run_ok(at)
    for i in range(lecturer_sign_in.MAX_ATTEMPTS):
        at.text_input(key="host_lecturer_key").set_value(f"guess {i}").run()
    assert not [t for t in at.text_input if t.key == "host_lecturer_key"]
    assert any("Too many wrong keys" in w.value for w in at.warning)
    assert not CONTROLS & _labels(at)


def test_the_presenter_view_asks_for_the_key_before_a_round(db):
    at = make_app(present="1")
    run_ok(at)
    assert "Start a round" not in _labels(at)
    at.text_input(key="lesson_round_lecturer_key").set_value(LECTURER_KEY).run()
    assert "Start a round" in _labels(at)
    # ... and the link way: ?lecturer=KEY signs in and leaves the address
    at = make_app(present="1", lecturer=LECTURER_KEY)
    run_ok(at)
    assert "lecturer" not in at.query_params and "Start a round" in _labels(at)
    assert os.environ.get(lecturer.LECTURER_KEY_ENV) == LECTURER_KEY
