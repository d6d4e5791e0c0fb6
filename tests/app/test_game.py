"""The class round against a real database: SQLite (a file) and PostgreSQL (Debian's server, started here).

Rules (codes, tokens, reveal, close, late join, off-map and double guesses, expiry, cleanup), a round played
with real mechanisms and scored against brute force, guesses racing the reveal on several threads, the CSV
export, and the Alembic migration matching the models.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import threading
from datetime import timedelta

import numpy as np
import pytest
from pg_fixture import pg_url  # noqa: F401 (fixture)
from sqlalchemy import select, update

import panda
from app.game import round_csv, rounds
from app.server.db import store
from app.server.db.models import Base, Entry, Game, Round
from panda import class_round
from panda.mechanisms import BASELINES
from panda.repeated import posterior_after

VIEW = ["city:kotka", 60, 30, 30, 0, "road", 1, "uniform"]


@pytest.fixture(scope="module")
def small():
    """A real instance (Kotka, 60 places, 30 outputs) and EM's matrix at 3/km."""
    inst = panda.make_instance(panda.load_city("kotka"), n_records=60, n_outputs=30, n_users=30, loss="road", seed=0)
    return inst, BASELINES["em"](inst, 3.0).matrix


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    if request.param == "sqlite":
        u = f"sqlite:///{tmp_path / 'class.db'}"
    else:
        u = request.getfixturevalue("pg_url")
    yield u
    store.dispose(u)


def _draw(small, seed=0):
    inst, matrix = small
    rng = np.random.default_rng(seed)
    return lambda view, rnd: class_round.draw_entry(matrix, inst.prior, rnd.n_reports, rnd.shared_place, rng=rng)


def _score(small, seed=0):
    inst, matrix = small
    rng = np.random.default_rng(seed)
    return lambda rnd, entries: class_round.score_round(
        inst.prior, matrix, inst.d_km * 1000.0, entries, rnd.n_reports, rng=rng
    )


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(rounds.GameError) as info:
        fn(*args, **kwargs)
    return str(info.value)


# --- codes and tokens ---


def test_join_codes_are_random_over_an_unambiguous_alphabet():
    codes = [rounds.new_code() for _ in range(2000)]
    assert all(len(c) == rounds.CODE_LENGTH and set(c) <= set(rounds.CODE_ALPHABET) for c in codes)
    assert not set("01OIL") & set(rounds.CODE_ALPHABET)
    assert len(set(codes)) == len(codes)
    # Consecutive codes share a character at a position about 1/31 of the time, as independent draws do
    # (a counter or a clock would share far more).
    same = sum(a[i] == b[i] for a, b in itertools.pairwise(codes) for i in range(rounds.CODE_LENGTH))
    rate = same / ((len(codes) - 1) * rounds.CODE_LENGTH)
    assert abs(rate - 1 / len(rounds.CODE_ALPHABET)) < 0.015
    # Every character of the alphabet turns up at every position.
    for i in range(rounds.CODE_LENGTH):
        assert {c[i] for c in codes} == set(rounds.CODE_ALPHABET)


@pytest.mark.parametrize(
    "typed, expected",
    [(" k7m-2qx ", "K7M2QX"), ("abcdef", "ABCDEF")],
)
def test_a_typed_code_is_normalised(typed, expected):
    assert rounds.normalize_code(typed) == expected


@pytest.mark.parametrize("bad", ["", "ABC", "ABCDEFG", "ABCDE0", "[x](https://e.invalid)", "<img src=x>", "x" * 10_000])
def test_a_bad_code_is_a_sentence_that_echoes_no_markup(bad):
    message = _error(rounds.normalize_code, bad)
    assert "is not a join code" in message
    assert not set("[]()<>:/") & set(message.split("”")[0])
    assert len(message) < 120


def test_tokens_are_stored_only_as_hashes(small, url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    token = rounds.join(code, url=url)
    with store.session(url, read=True) as s:
        game = s.scalars(select(Game).where(Game.code == code)).one()
        dumped = repr(game.__dict__) + repr([p.__dict__ for p in game.players])
    assert key not in dumped and token not in dumped
    assert game.host_token_sha256 != key and len(game.host_token_sha256) == 64


# --- a whole round ---


def test_a_round_played_and_scored_against_brute_force(small, url):
    inst, matrix = small
    d = inst.d_km * 1000.0
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "each"), url=url)
    tokens = [rounds.join(code, url=url) for _ in range(6)]
    views = [rounds.player_view(code, t, _draw(small, i), url=url) for i, t in enumerate(tokens)]
    assert [v.player_number for v in views] == [1, 2, 3, 4, 5, 6]
    assert all(v.secret is None and v.error_m is None and len(v.reports) == 1 for v in views)
    guesses = [3, 17, 17, 40, 59]  # the sixth student does not guess
    for t, g in zip(tokens, guesses, strict=False):
        assert rounds.guess(code, t, g, url=url).startswith("Guess saved: place")
    live = rounds.host_view(code, key, url=url)
    assert sorted(live.guesses) == sorted(guesses) and live.n_players == 6
    assert all("secret" not in e for e in live.entries)  # nothing secret on the lecturer's screen before the reveal

    summary = rounds.reveal(code, key, _score(small), url=url)

    with store.session(url, read=True) as s:
        entries = list(s.scalars(select(Entry).order_by(Entry.id).where(Entry.round.has(Round.game.has(code=code)))))
    assert len(entries) == 6
    errors = []
    for e, g in zip(entries, [*guesses, None], strict=True):
        post = posterior_after(inst.prior, matrix, e.reports)
        brute = min(range(inst.n_records), key=lambda x: sum(post[y] * d[y, x] for y in range(inst.n_records)))
        assert e.bayes_place == brute
        assert e.bayes_error_m == pytest.approx(d[brute, e.secret_place])
        if g is None:
            assert e.error_m is None and e.rank is None
        else:
            assert e.guess_place == g
            assert e.error_m == pytest.approx(d[g, e.secret_place])
            errors.append(e.error_m)
    ranks = [e.rank for e in entries[:5]]
    assert ranks == [1 + sum(f < x for f in errors) for x in errors]
    assert summary["n_players"] == 6 and summary["n_guesses"] == 5
    assert summary["class_mean_m"] == pytest.approx(np.mean(errors))
    assert summary["class_median_m"] == pytest.approx(np.median(errors))
    assert summary["best_m"] == pytest.approx(min(errors))
    assert summary["bayes_mean_m"] == pytest.approx(np.mean([e.bayes_error_m for e in entries]))
    # Exact expected error of the Bayes attacker from each secret place (one report): a sum over outputs.
    expected = []
    for e in entries:
        total = 0.0
        for y in range(matrix.shape[1]):
            if matrix[e.secret_place, y] > 0:
                post = posterior_after(inst.prior, matrix, [y])
                g = int(np.argmin(post @ d))
                total += matrix[e.secret_place, y] * d[g, e.secret_place]
        expected.append(total)
    assert summary["bayes_expected_m"] == pytest.approx(np.mean(expected))

    # What a student sees after the reveal: the truth, their error, the attacker's, their rank.
    after = rounds.player_view(code, tokens[0], _draw(small), url=url)
    assert after.secret == entries[0].secret_place
    assert after.error_m == pytest.approx(entries[0].error_m)
    assert after.rank == entries[0].rank and after.n_ranked == 5
    assert after.reports == views[0].reports  # a reload keeps the same report


def test_the_rules_each_give_a_plain_sentence(small, url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    alice = rounds.join(code, url=url)
    rounds.player_view(code, alice, _draw(small), url=url)
    assert "off the map" in _error(rounds.guess, code, alice, 60, url=url)
    assert "off the map" in _error(rounds.guess, code, alice, -1, url=url)
    assert "off the map" in _error(rounds.guess, code, alice, "3", url=url)
    assert "off the map" in _error(rounds.guess, code, alice, True, url=url)
    assert rounds.guess(code, alice, 5, url=url).startswith("Guess saved")
    assert rounds.guess(code, alice, 5, url=url) == "Already saved: your guess is place 5."  # a double submit
    assert rounds.guess(code, alice, 6, url=url).startswith("Guess changed: place 6")
    assert "not a player" in _error(rounds.guess, code, "forged-token", 5, url=url)
    assert "no round with the code" in _error(rounds.join, "ZZZZZZ", url=url)
    # Only the lecturer's key reveals or closes; a student's token is not one.
    for bad in ("", alice, key + "x", None):
        assert "Only the lecturer" in _error(rounds.reveal, code, bad, _score(small), url=url)
        assert "Only the lecturer" in _error(rounds.close_round, code, bad, url=url)
        assert "Only the lecturer" in _error(rounds.host_view, code, bad, url=url)
    # A student arriving late joins and plays.
    bob = rounds.join(code, url=url)
    assert rounds.player_view(code, bob, _draw(small), url=url).reports
    rounds.reveal(code, key, _score(small), url=url)
    assert "revealed" in _error(rounds.guess, code, alice, 7, url=url)
    assert "already revealed" in _error(rounds.reveal, code, key, _score(small), url=url)
    # Joining after the reveal: in, but waiting for the next round.
    carol = rounds.join(code, url=url)
    assert rounds.player_view(code, carol, _draw(small), url=url).waiting
    rounds.close_round(code, key, url=url)
    assert "closed" in _error(rounds.guess, code, alice, 7, url=url)
    assert "closed" in _error(rounds.join, code, url=url)
    # The next round: everyone (Carol included) gets a fresh report; a round not revealed is closed by "next".
    assert rounds.next_round(code, key, rounds.RoundSpec("em", 1.0, 3, "shared", 11), url=url) == 2
    for t in (alice, carol):
        v = rounds.player_view(code, t, _draw(small), url=url)
        assert v.round_number == 2 and len(v.reports) == 3 and v.secret is None
    assert rounds.next_round(code, key, rounds.RoundSpec("em", 2.0), url=url) == 3
    assert rounds.host_view(code, key, url=url).rounds[1]["status"] == "closed"


def test_the_shared_secret_is_the_lecturers_place(small, url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 2, "shared", 42), url=url)
    tokens = [rounds.join(code, url=url) for _ in range(3)]
    for t in tokens:
        rounds.player_view(code, t, _draw(small), url=url)
        rounds.guess(code, t, 42, url=url)
    rounds.reveal(code, key, _score(small), url=url)
    views = [rounds.player_view(code, t, _draw(small), url=url) for t in tokens]
    assert {v.secret for v in views} == {42}
    assert all(v.error_m == 0.0 and v.rank == 1 for v in views)  # a perfect guess, tied first


def test_old_games_expire_and_are_cleaned_up(small, url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    with store.session(url) as s:
        born = s.scalars(select(Game.created_at).where(Game.code == code)).one()
        s.execute(update(Game).where(Game.code == code).values(created_at=born - timedelta(hours=25)))
    assert "expired" in _error(rounds.join, code, url=url)
    assert "expired" in _error(rounds.host_view, code, key, url=url)
    rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)  # opening a game cleans up
    with store.session(url, read=True) as s:
        assert s.scalars(select(Game).where(Game.code == code)).one_or_none() is None


def test_the_reveal_scores_with_no_transaction_open(small, url):
    """While the scores are computed (a worker job, maybe queued) the round is "scoring": a guess is refused with
    a sentence at once, and other writes (a join) go through; nothing waits on a lock held by the reveal."""
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    t1, t2 = rounds.join(code, url=url), rounds.join(code, url=url)
    for t in (t1, t2):
        rounds.player_view(code, t, _draw(small), url=url)
    rounds.guess(code, t1, 5, url=url)
    seen: dict = {}
    real = _score(small)

    def score(spec, entries):
        seen["status"] = rounds.status(code, url=url)
        seen["guess"] = _error(rounds.guess, code, t2, 7, url=url)
        seen["late_join"] = rounds.join(code, url=url)  # a write: blocks (SQLite: "database is locked") if held
        seen["spec"] = (spec.mechanism, spec.epsilon_per_km, spec.n_reports)
        return real(spec, entries)

    summary = rounds.reveal(code, key, score, url=url)
    assert seen["status"] == (1, "scoring", 1, "off")
    assert "revealed" in seen["guess"] and "moment" in seen["guess"]
    assert seen["late_join"] and seen["spec"] == ("em", 3.0, 1)
    assert rounds.status(code, url=url)[:2] == (1, "revealed")
    assert summary["n_guesses"] == 1 and summary["best_place"] == 5
    pv = rounds.player_view(code, t1, _draw(small), url=url)
    assert pv.guess == 5 and pv.error_m is not None and pv.rank == 1


def test_a_failed_scoring_leaves_the_round_open_and_a_stuck_one_can_be_revealed_again(small, url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    t = rounds.join(code, url=url)
    rounds.player_view(code, t, _draw(small), url=url)

    def broken(spec, entries):
        raise RuntimeError("the worker died")

    with pytest.raises(RuntimeError):
        rounds.reveal(code, key, broken, url=url)
    assert rounds.status(code, url=url)[:2] == (1, "open")
    assert rounds.guess(code, t, 3, url=url).startswith("Guess saved")  # the class goes on
    # A reveal whose server stopped mid-way leaves "scoring": refused while fresh, taken over once stale.
    with store.session(url) as s:
        s.execute(update(Round).where(Round.game.has(code=code)).values(status="scoring", revealed_at=rounds._now()))
    assert "being revealed" in _error(rounds.reveal, code, key, _score(small), url=url)
    old = rounds._now() - rounds.SCORING_STALE - timedelta(seconds=1)
    with store.session(url) as s:
        s.execute(update(Round).where(Round.game.has(code=code)).values(revealed_at=old))
    assert rounds.reveal(code, key, _score(small), url=url)["n_guesses"] == 1
    assert rounds.status(code, url=url)[:2] == (1, "revealed")


def test_no_guess_is_lost_or_taken_after_the_reveal(small, url):
    """20 students guess on their own threads while the lecturer reveals: every guess is either stored before
    the reveal (and scored) or refused with the reveal's sentence; none is stored after it."""
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    tokens = [rounds.join(code, url=url) for _ in range(20)]
    for t in tokens:
        rounds.player_view(code, t, _draw(small), url=url)
    outcome: dict[str, str] = {}
    start = threading.Barrier(21)

    def student(i: int, t: str) -> None:
        start.wait()
        try:
            outcome[t] = rounds.guess(code, t, i, url=url)
        except rounds.GameError as exc:
            outcome[t] = "refused: " + str(exc)

    threads = [threading.Thread(target=student, args=(i, t)) for i, t in enumerate(tokens)]
    for th in threads:
        th.start()
    start.wait()
    rounds.reveal(code, key, _score(small), url=url)
    for th in threads:
        th.join()
    with store.session(url, read=True) as s:
        rnd = s.scalars(select(Round).where(Round.game.has(code=code))).one()
        entries = list(s.scalars(select(Entry).where(Entry.round_id == rnd.id)))
        stored = {e.guess_place for e in entries} - {None}
        assert all((e.error_m is None) == (e.guess_place is None) for e in entries)  # every stored guess scored
    saved = {i for i, t in enumerate(tokens) if outcome[t].startswith("Guess saved")}
    refused = {i for i, t in enumerate(tokens) if "revealed" in outcome[t]}
    assert saved | refused == set(range(20)) and not saved & refused
    assert stored == saved  # stored before the reveal, so scored; nothing slipped in after
    assert rnd.summary["n_guesses"] == len(saved)


def test_many_phones_join_at_once_with_distinct_numbers(url):
    code, _ = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    tokens: list[str] = []
    lock = threading.Lock()

    def phone() -> None:
        t = rounds.join(code, url=url)
        with lock:
            tokens.append(t)

    threads = [threading.Thread(target=phone) for _ in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(set(tokens)) == 16
    with store.session(url, read=True) as s:
        game = s.scalars(select(Game).where(Game.code == code)).one()
        assert sorted(p.number for p in game.players) == list(range(1, 17))


def test_the_rounds_export_as_csv(small, url):
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0), url=url)
    t = rounds.join(code, url=url)
    for n, eps in enumerate((3.0, 1.0, 0.5)):
        if n:
            rounds.next_round(code, key, rounds.RoundSpec("em", eps), url=url)
        rounds.player_view(code, t, _draw(small), url=url)
        rounds.guess(code, t, 10, url=url)
        rounds.reveal(code, key, _score(small), url=url)
    rows = list(csv.DictReader(io.StringIO(round_csv.rounds_csv(rounds.host_view(code, key, url=url)))))
    assert [float(r["epsilon_per_km"]) for r in rows] == [3.0, 1.0, 0.5]
    assert all(r["n_guesses"] == "1" and float(r["class_mean_m"]) >= 0 for r in rows)
    table = rounds.host_view(code, key, url=url).rounds
    assert [float(r["class_mean_m"]) for r in rows] == pytest.approx([r["class_mean_m"] for r in table])


def test_the_migration_matches_the_models(url):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    eng = store.engine(url)
    with eng.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


# --- scoring, without a database ---


def test_competition_ranks():
    assert class_round.competition_ranks([30.0, 10.0, None, 10.0, 50.0]) == [3, 1, None, 1, 4]
    assert class_round.competition_ranks([]) == []


def test_the_expected_error_after_k_reports_converges_to_the_exact_one(small):
    inst, matrix = small
    d = inst.d_km * 1000.0
    exact = class_round.expected_bayes_error_m(inst.prior, matrix, 7, 1, d, rng=np.random.default_rng(0))
    # k = 1 by sampling (the k > 1 code path given one report) agrees with the exact sum within 3 standard errors.
    rng = np.random.default_rng(1)
    row = matrix[7]
    seqs = rng.choice(row.size, size=4000, p=row / row.sum())
    errs = [d[int(np.argmin(posterior_after(inst.prior, matrix, [y]) @ d)), 7] for y in seqs]
    assert abs(np.mean(errs) - exact) < 3 * np.std(errs) / math.sqrt(len(errs)) + 1e-9
    # More reports: the attacker gets closer (on average), as the Lesson's k-reports chart shows.
    k5 = class_round.expected_bayes_error_m(inst.prior, matrix, 7, 5, d, rng=np.random.default_rng(2), n_sequences=400)
    assert k5 < exact


def test_draw_entry_uses_the_lecturers_place_or_the_prior(small):
    inst, matrix = small
    rng = np.random.default_rng(0)
    secret, reports = class_round.draw_entry(matrix, inst.prior, 4, 9, rng=rng)
    assert secret == 9 and len(reports) == 4 and all(matrix[9, j] > 0 for j in reports)
    prior = np.zeros(inst.n_records)
    prior[[2, 5]] = 0.5
    secrets_ = {class_round.draw_entry(matrix, prior, 1, None, rng=rng)[0] for _ in range(50)}
    assert secrets_ == {2, 5}


def test_the_class_as_one_attacker_pools_every_report_of_the_shared_place(small, url):
    """A shared round, 5 students with 3 reports each: the summary's pooled guess is the brute-force Bayes guess on
    all 15 reports (the product of their likelihoods, computed here without the library's log space), and the
    re-send defence's on each phone's first report; a round where each student has their own place pools nothing."""
    inst, matrix = small
    d = inst.d_km * 1000.0
    secret = 7
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 3, "shared", secret), url=url)
    tokens = [rounds.join(code, url=url) for _ in range(5)]
    for i, t in enumerate(tokens):
        rounds.player_view(code, t, _draw(small, i), url=url)
        rounds.guess(code, t, 10 + i, url=url)
    summary = rounds.reveal(code, key, _score(small), url=url)
    with store.session(url, read=True) as s:
        reports = [list(e.reports) for e in s.scalars(select(Entry).where(Entry.round.has(Round.game.has(code=code))))]
    assert len(reports) == 5 and all(len(r) == 3 for r in reports)

    def brute(seen: list[int]) -> int:
        joint = inst.prior * np.prod(matrix[:, seen], axis=1)
        post = joint / joint.sum()
        return min(range(inst.n_records), key=lambda g: sum(post[x] * d[x, g] for x in range(inst.n_records)))

    everything = [y for r in reports for y in r]
    pooled, resend = brute(everything), brute([r[0] for r in reports])
    assert summary["pooled_n_reports"] == 15 and summary["resend_n_reports"] == 5
    assert summary["pooled_place"] == pooled and summary["pooled_error_m"] == pytest.approx(d[pooled, secret])
    assert summary["resend_place"] == resend and summary["resend_error_m"] == pytest.approx(d[resend, secret])

    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 3, "each"), url=url)
    for i, t in enumerate([rounds.join(code, url=url) for _ in range(4)]):
        rounds.player_view(code, t, _draw(small, 100 + i), url=url)
    each = rounds.reveal(code, key, _score(small), url=url)
    assert len({e["secret"] for e in rounds.host_view(code, key, url=url).entries}) > 1  # (these seeds' draws)
    assert "pooled_place" not in each


def test_pooling_refuses_entries_of_several_places(small):
    inst, matrix = small
    entries = [{"secret": 1, "reports": [0]}, {"secret": 2, "reports": [1]}]
    with pytest.raises(ValueError, match="one shared secret place"):
        class_round.pooled_attacker(inst.prior, matrix, inst.d_km * 1000.0, entries)


def _play_draw(small, seed):
    """What the phone's page draws (app/app_pages/play.py): the round's seed in a question round, else its own."""
    inst, matrix = small
    own = np.random.default_rng(seed)

    def draw(view, rnd):
        rng = np.random.default_rng(rnd.question_seed) if rnd.question_seed is not None else own
        return class_round.draw_entry(matrix, inst.prior, rnd.n_reports, rnd.shared_place, rng=rng)

    return draw


def test_a_question_round_shows_every_phone_and_the_projector_the_same_reports(small, url):
    """One question for the room: every phone draws the same reports of the one place (the round's seed, not the
    phone's), the room's view shows them before the reveal, nothing is pooled, and the next round draws anew."""
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 2, "question", 11), url=url)
    tokens = [rounds.join(code, url=url) for _ in range(6)]
    views = [rounds.player_view(code, t, _play_draw(small, i), url=url) for i, t in enumerate(tokens)]
    assert len({tuple(v.reports) for v in views}) == 1 and len(views[0].reports) == 2
    room = rounds.room_view(code, url=url)
    assert room.current["question_reports"] == views[0].reports
    assert room.current["shared_place"] is None and all("secret" not in e for e in room.entries)
    for i, t in enumerate(tokens):
        rounds.guess(code, t, 20 + i, url=url)
    summary = rounds.reveal(code, key, _score(small), url=url)
    assert summary["n_guesses"] == 6 and not any(k.startswith(("pooled_", "resend_")) for k in summary)
    with store.session(url, read=True) as s:
        mine = select(Entry).where(Entry.round.has(Round.game.has(code=code)))
        assert {e.secret_place for e in s.scalars(mine)} == {11}
    rounds.next_round(code, key, rounds.RoundSpec("em", 3.0, 2, "question"), prior=small[0].prior, url=url)
    again = [rounds.player_view(code, t, _play_draw(small, 50 + i), url=url) for i, t in enumerate(tokens[:3])]
    assert len({tuple(v.reports) for v in again}) == 1
    seeds = []
    with store.session(url, read=True) as s:
        game = s.scalars(select(Game).where(Game.code == code)).one()
        for rnd in s.scalars(select(Round).where(Round.game_id == game.id)):
            seeds.append(rounds._question_seed(game, rnd))
    assert len(set(seeds)) == 2  # a new round, a new draw


def test_a_second_vote_keeps_the_first_and_the_reveal_scores_both(small, url):
    """Peer instruction: the lecturer asks the room to vote again; the first vote's guesses are kept, students
    change theirs, and the summary states the first vote's errors and how many changed (recomputed here)."""
    from app.game import room_controls

    inst, _ = small
    d = inst.d_km * 1000.0
    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "question", 9), url=url)
    tokens = [rounds.join(code, url=url) for _ in range(5)]
    for i, t in enumerate(tokens):
        rounds.player_view(code, t, _play_draw(small, i), url=url)
    first = [30, 31, 32, 33]  # the fifth student does not vote the first time
    for t, g in zip(tokens, first, strict=False):
        rounds.guess(code, t, g, url=url)
    assert rounds.status(code, url=url)[2] == 1
    assert room_controls.second_vote(code, key, url=url) == 4
    # The phones see it: the polled status changes (they redraw) and their view says "second vote".
    assert rounds.status(code, url=url) == (1, "open", 2, "off")
    assert rounds.player_view(code, tokens[0], _play_draw(small, 0), url=url).vote == 2
    assert "second vote" in _error(room_controls.second_vote, code, key, url=url)
    second = [30, 9, 10, 33, 12]  # two change, two keep theirs, the fifth votes now
    for t, g in zip(tokens, second, strict=True):
        rounds.guess(code, t, g, url=url)
    live = rounds.host_view(code, key, url=url)
    assert live.current["vote"] == 2
    assert sorted(e["first_guess"] for e in live.entries if e["first_guess"] is not None) == first
    summary = rounds.reveal(code, key, _score(small), url=url)
    first_errors = [d[g, 9] for g in first]
    assert summary["first_vote_guesses"] == 4
    assert summary["first_vote_median_m"] == pytest.approx(np.median(first_errors))
    assert summary["first_vote_mean_m"] == pytest.approx(np.mean(first_errors))
    assert summary["n_changed"] == 2
    assert summary["class_median_m"] == pytest.approx(np.median([d[g, 9] for g in second]))
    assert "open round" in _error(room_controls.second_vote, code, key, url=url)


def test_the_lecturers_timer_closes_the_guesses(small, url):
    from app.game import room_controls

    code, key = rounds.open_game(VIEW, rounds.RoundSpec("em", 3.0, 1, "each"), url=url)
    token = rounds.join(code, url=url)
    rounds.player_view(code, token, _play_draw(small, 0), url=url)
    assert "seconds" in _error(room_controls.start_timer, code, key, 7, url=url)
    assert "seconds" in _error(room_controls.start_timer, code, key, True, url=url)
    assert "lecturer" in _error(room_controls.start_timer, code, "not-the-key", 60, url=url).lower()
    assert rounds.status(code, url=url)[3] == "off"
    assert rounds.player_view(code, token, _play_draw(small, 0), url=url).timer_left_s is None
    room_controls.start_timer(code, key, 60, url=url)
    left = rounds.room_view(code, url=url).current["timer_left_s"]
    assert 55 < left <= 60
    assert rounds.status(code, url=url)[3] == "running"
    assert 55 < rounds.player_view(code, token, _play_draw(small, 0), url=url).timer_left_s <= 60
    assert rounds.guess(code, token, 4, url=url).startswith("Guess saved")
    with store.session(url) as s:  # the minute passes
        s.execute(update(Round).where(Round.game.has(code=code)).values(timer_ends_at=rounds._now()))
    assert "Time is up" in _error(rounds.guess, code, token, 5, url=url)
    assert rounds.room_view(code, url=url).current["timer_left_s"] == 0.0
    assert rounds.status(code, url=url)[3] == "up"  # the phones redraw with "Time is up"
    assert rounds.player_view(code, token, _play_draw(small, 0), url=url).timer_left_s == 0.0
