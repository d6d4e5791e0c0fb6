"""The class round's screen: the join code and QR code, guesses as they arrive, the reveal.

``/host?code=K7M2QX`` shows the room what anyone with the code may see. A session signed in with the lecturer
key (app/widgets/lecturer_sign_in.py: the laptop that started the round, or the lecturer's phone) also gets the
controls: reveal, end, play again. ``&room=1`` never shows controls (the projector, while a phone controls). An
old address with ``&key=...`` (a round's own token) still controls its round; the key leaves the address at once.
"""

from __future__ import annotations

import html
import logging
import os
import secrets
import statistics
import urllib.parse

import numpy as np
import segno
import streamlit as st

from app import state
from app.figures import charts, game_maps, style, tables
from app.figures.palette import MECHANISM_COLORS
from app.game import room_controls, round_csv, rounds
from app.model import lesson_numbers
from app.model.lesson_numbers import class_as_attacker_sentence
from app.model.messages import plain_error
from app.model.panda_numbers import fmt_m
from app.server import lecturer
from app.widgets import lecturer_sign_in
from app.widgets.current_view import job_failure
from panda.execution import JobError
from panda.repeated import posterior_after

log = logging.getLogger(__name__)
#: How often the lecturer's screen picks up new guesses, seconds.
POLL_S = 2.0
#: The lecturer's timer (one of app.game.room_controls.TIMER_SECONDS), seconds.
TIMER_S = 60
MAP_HEIGHT = 500
#: The join link's origin when the lecturer's own address is not what phones can reach (e.g. localhost).
PUBLIC_URL_ENV = "PANDA_PUBLIC_URL"

ss = st.session_state
st.html(style.css(presenting=True) + "<style>[data-testid='stSidebar'] { display: none; }</style>")
lecturer_sign_in.consume_link_key()
code = str(st.query_params.get("code", ""))[:64]
if "key" in st.query_params:  # a round's own token in the address: into this session, out of the projected bar
    ss.setdefault("host_keys", {})[code] = str(st.query_params.get("key", ""))[:128]
    del st.query_params["key"]
#: The projector's page while the lecturer controls from another device: never any control.
ROOM_ONLY = st.query_params.get("room") == "1"


def _token() -> str | None:
    """The round's lecturer token this session holds: its own (an old address), or the lecturer key's."""
    given = ss.get("host_keys", {}).get(code)
    if given:
        return given
    if lecturer_sign_in.signed_in():
        try:
            return lecturer.round_token(rounds.normalize_code(code))
        except (rounds.GameError, OSError, ValueError):
            return None
    return None


def _load(token: str | None) -> rounds.HostView:
    return rounds.host_view(code, token) if token else rounds.room_view(code)


def _host_view() -> tuple[rounds.HostView | None, str | None]:
    """The round as this session may see it, and the token that controls it (None: the room's view)."""
    token = _token()
    try:
        try:
            return _load(token), token
        except rounds.GameError:
            if token is None:
                raise
            return rounds.room_view(code), None  # a key that does not open this round: the room's view
    except rounds.GameError as exc:
        st.error(str(exc))
    except Exception:  # noqa: BLE001 (never a traceback, nor the database's own words, in a page anyone can open)
        log.exception("the class database could not be read for the host page")
        st.error("The class database could not be read. Reload the page in a moment; the server's log says why.")
    return None, None


hv, TOKEN = _host_view()
CONTROLS = TOKEN is not None and not ROOM_ONLY
if hv is None:
    st.page_link("app_pages/lesson.py", label="Back to the Lesson (start a round in the presenter view)")
    st.stop()

view = tuple(hv.view)
try:
    inst = state.instance(*view)
    net = state.network(view[0])
except Exception as exc:  # noqa: BLE001
    log.exception("the round's places could not be prepared")
    st.error(f"The round's places could not be prepared: {plain_error(exc)[0]}")
    st.stop()
cur = hv.current
label = lesson_numbers.MECHANISMS.get(cur["mechanism"], (cur["mechanism"],))[0]
k = int(cur["n_reports"])


def _matrix(row: dict) -> np.ndarray:
    rnd_options = tuple(tuple(o) for o in (row.get("options") or ()))
    return state.baseline(view, row["mechanism"], float(row["epsilon_per_km"]), rnd_options).matrix


def _join_url() -> str:
    base = os.environ.get(PUBLIC_URL_ENV, "").strip()
    if not base:
        parts = urllib.parse.urlsplit(st.context.url or "http://localhost:8501/host")
        path = parts.path.rsplit("/", 1)[0]
        base = f"{parts.scheme}://{parts.netloc}{path}"
    return f"{base.rstrip('/')}/play?code={hv.code}"


def _spread_m(places: list[int]) -> float | None:
    """The guesses' spread: the median road distance from each guess to their most central guess (m)."""
    if len(places) < 2:
        return None
    idx = np.asarray(places)
    d = inst.d_km[np.ix_(idx, idx)] * 1000.0
    centre = int(np.argmin(d.sum(axis=1)))
    return float(statistics.median(d[centre]))


def _secret_words(row: dict) -> str:
    """Whose secret place the reports come from (and, for a shared place the class saw revealed, when)."""
    if row["secret_mode"] == "each":
        return "every student has their own secret place"
    if row["secret_mode"] == "question":
        return "one question for the room: every phone shows the same report" + (
            f" (its place was revealed in round {row['seen_in_round']})" if row.get("seen_in_round") else ""
        )
    seen = row.get("seen_in_round")
    return "one secret place for all" + (f", one the class has seen: it was revealed in round {seen}" if seen else "")


# ---------------------------------------------------------------------------------------------
st.markdown(f"#### Class round {cur['round']}: where was this report made?")
st.caption(
    f"{label} at ε = {cur['epsilon_per_km']:g}/km · {k} report{'s' if k > 1 else ''} per student · "
    + _secret_words(cur)
    + " · errors are road distances"
)
st.page_link("app_pages/lesson.py", label="Back to the Lesson", icon=":material/arrow_back:")
left, right = st.columns([3, 2], gap="medium")

with right:
    join_url = _join_url()
    if cur["status"] == "open":
        qr = segno.make(join_url, error="m")
        c1, c2 = st.columns([3, 2], vertical_alignment="center")
        c1.html(
            "<div style='font-size:0.9rem'>Scan the code, or open …/play and type</div>"
            "<div style='font-size:3rem;font-weight:700;letter-spacing:0.08em;line-height:1.15;white-space:nowrap'>"
            f"{html.escape(hv.code)}</div>"
        )
        c2.image(qr.svg_inline(scale=6, border=2), width="stretch", alt=f"QR code of the join link {join_url}")
        st.caption(f"Join link: {join_url}")
        if "localhost" in join_url or "127.0.0.1" in join_url:
            st.caption(
                "Phones cannot reach *localhost*: serve the dashboard on this computer's address on the room's "
                f"network (README: *Play a round in class*), or set {PUBLIC_URL_ENV} to the address students open."
            )
    else:  # the results need the room on the projector: the join card shrinks to one line
        st.caption(f"Join code **{html.escape(hv.code)}** · {join_url}")


#: Open: the guesses arrive. Scoring: the page picks up the scores, or offers to score again once the
#: scoring's server is known to have stopped.
LIVE = ("open", "scoring")
LIVE_EVERY = POLL_S if cur["status"] in LIVE else None


def _read() -> rounds.HostView:
    """The game as the database has it now (what the page shows, if the database cannot be read this time)."""
    try:
        return _load(TOKEN)
    except Exception:  # noqa: BLE001 (a database hiccup: the page keeps what it shows and asks again)
        return hv


def _now() -> rounds.HostView:
    """The current state (re-read while the round is live); the whole page reruns when the round moves on."""
    if cur["status"] not in LIVE:
        return hv
    live = _read()
    moved = ("round", "status", "scoring_stuck")
    if any(live.current.get(name) != cur.get(name) for name in moved):
        st.rerun(scope="app")
    return live


@st.fragment(run_every=LIVE_EVERY)
def _live_map() -> None:
    """The map of the class's guesses (only this part of the page reruns while polling)."""
    live = _now()
    revealed = cur.get("n_guesses") is not None
    segments, _ = state.road_segments(view[0])
    pooled = cur.get("pooled_place") if revealed else None
    belief = None
    if revealed and cur["secret_mode"] == "question" and live.current.get("question_reports"):
        # The reveal of one question: the Bayes attacker's belief after the room's report, over the room's cloud.
        belief = posterior_after(inst.prior, _matrix(cur), live.current["question_reports"])
    deck = game_maps.host_deck(
        inst,
        segments,
        guesses=live.guesses,
        first_guesses=[e["first_guess"] for e in live.entries if e.get("first_guess") is not None],
        belief=belief,
        entries=live.entries if revealed else None,
        reports=live.current.get("question_reports"),
        pooled_place=pooled,
        height_px=MAP_HEIGHT,
    )
    st.pydeck_chart(deck, height=MAP_HEIGHT, key="host_map")
    st.caption(
        "Black: the class's guesses (bigger: more students)"
        + (" · orange: where the reports were made · grey lines: each guess to its truth" if revealed else "")
        + (" · white: the report every phone shows" if live.current.get("question_reports") else "")
        + (" · grey rings: the first vote" if live.current.get("vote", 1) >= 2 else "")
        + (" · blue discs: the Bayes attacker's belief after that report" if belief is not None else "")
        + (" · blue ring: the class as one attacker" if pooled is not None else "")
        + f"  \nMap data {net.attribution}"
    )


@st.fragment(run_every=LIVE_EVERY)
def _live_counts() -> None:
    """Players, guesses and their spread."""
    live = _read() if cur["status"] == "open" else hv
    m1, m2, m3 = st.columns(3)
    m1.metric("Players", live.n_players)
    m2.metric("Guesses", len(live.guesses))
    m3.metric("Spread", fmt_m(_spread_m(live.guesses)), help="Median road distance from the central guess.")
    left_s = live.current.get("timer_left_s")
    if live.current.get("status") == "open" and left_s is not None:
        st.markdown(f"#### ⏱ {int(left_s)} s left" if left_s > 0 else "#### ⏱ Time is up: guesses are closed")
    if live.current.get("vote", 1) >= 2:
        firsts = [e for e in live.entries if e.get("first_guess") is not None]
        changed = sum(1 for e in firsts if e.get("guess") is not None and e["guess"] != e["first_guess"])
        then, now = _spread_m([e["first_guess"] for e in firsts]), _spread_m(live.guesses)
        st.markdown(
            f"**Second vote**: {changed} of the first vote's {len(firsts)} guesses changed "
            f"(spread then {fmt_m(then)}, now {fmt_m(now)})."
        )


def _score(rnd, entries: list[dict]) -> tuple[list[dict], dict]:  # noqa: ANN001 (a Round)
    """``panda.class_round.score_round`` on a worker (state.score_round), with a seed drawn here for this reveal."""
    matrix = _matrix({"mechanism": rnd.mechanism, "epsilon_per_km": rnd.epsilon_per_km, "options": rnd.options})
    return state.score_round(inst.prior, matrix, inst.d_km * 1000.0, entries, rnd.n_reports, secrets.randbits(64))


def _act(action: str) -> None:
    try:
        if action == "reveal":  # also a round stuck in "scoring": scored again from every entry
            rounds.reveal(code, TOKEN, _score)
        elif action == "close":
            rounds.close_round(code, TOKEN)
        elif action == "vote2":
            room_controls.second_vote(code, TOKEN)
        elif action == "timer":
            room_controls.start_timer(code, TOKEN, TIMER_S)
        elif action == "again":
            eps = float(ss.host_next_eps)
            # A shared round gets a new place (next_round draws it away from the places revealed so far) unless
            # the lecturer asks for this round's place again.
            same = cur["secret_mode"] != "each" and ss.get("host_next_place") == "same"
            spec = rounds.RoundSpec(
                cur["mechanism"],
                eps,
                k,
                cur["secret_mode"],
                cur["shared_place"] if same else None,
                options=tuple(tuple(o) for o in (cur.get("options") or ())),
            )
            with st.spinner(f"Building {label} at ε = {eps:g}/km ..."):
                if _matrix({"mechanism": cur["mechanism"], "epsilon_per_km": eps, "options": spec.options}) is None:
                    raise rounds.GameError(f"{label} has no full matrix at ε = {eps:g}/km here: pick another ε.")
            rounds.next_round(code, TOKEN, spec, prior=inst.prior)
        ss.pop("host_msg", None)
    except rounds.GameError as exc:
        ss.host_msg = str(exc)
    except JobError as exc:  # a worker's job failed (the scoring, a mechanism): nothing changed, try again
        ss.host_msg = f"{job_failure(exc)[0]} Nothing changed in the round: try again in a moment."
    except Exception as exc:  # noqa: BLE001 (never a traceback in the page)
        ss.host_msg = f"That did not work: {plain_error(exc)[0]} Nothing changed in the round."


with left:
    _live_map()
with right:
    _live_counts()


def _lecturer_corner() -> None:
    """For the lecturer: where the projector's page and the phone's controls are; for anyone else: sign in."""
    if CONTROLS:
        st.caption(
            f"Projector: [the room's view]({_room_url()}) shows no controls. To control from your phone, open "
            f"…/host?code={html.escape(hv.code)} there and type the lecturer key."
        )
    elif not ROOM_ONLY:
        with st.expander("Lecturer", icon=":material/key:"):
            if lecturer_sign_in.form("host", "reveal, end and start rounds from this device"):
                st.rerun()


def _room_url() -> str:
    return f"host?code={urllib.parse.quote(hv.code)}&room=1"


with right:
    if ss.get("host_msg"):
        st.warning(ss.host_msg)
    summary_shown = cur.get("n_guesses") is not None
    if not CONTROLS:
        if cur["status"] == "scoring":
            st.info(f"Round {cur['round']}'s guesses are being scored: the scores appear here in a moment.")
    elif cur["status"] == "open":
        b1, b2 = st.columns(2)
        b1.button(
            "Reveal", type="primary", icon=":material/visibility:", on_click=_act, args=("reveal",), width="stretch"
        )
        b2.button("End round", icon=":material/stop_circle:", on_click=_act, args=("close",), width="stretch")
        b3, b4 = st.columns(2)
        b3.button(
            "Vote again",
            icon=":material/forum:",
            on_click=_act,
            args=("vote2",),
            disabled=cur.get("vote", 1) >= 2,
            help="Talk to your neighbour, then vote again: the first vote's guesses are kept and shown in grey.",
            width="stretch",
        )
        b4.button(f"Timer {TIMER_S} s", icon=":material/timer:", on_click=_act, args=("timer",), width="stretch")
    elif cur["status"] == "scoring" and cur.get("scoring_stuck"):
        st.warning(
            f"Round {cur['round']}'s scoring stopped before it finished (the server scoring it stopped). "
            "Every guess is kept: score them now."
        )
        st.button("Score the guesses", type="primary", icon=":material/visibility:", on_click=_act, args=("reveal",))
    elif cur["status"] == "scoring":
        st.info(f"Round {cur['round']}'s guesses are being scored: the scores appear here in a moment.")
    if summary_shown:
        s1, s2 = st.columns(2)
        s1.metric("Class: mean error", fmt_m(cur.get("class_mean_m")))
        s2.metric("Class: median", fmt_m(cur.get("class_median_m")))
        s3, s4 = st.columns(2)
        s3.metric(
            "Bayes attacker (expected)",
            fmt_m(cur.get("bayes_expected_m")),
            help="The best attacker's expected error from the same secret places: it knows the mechanism and the "
            "prior. " + ("Exact for one report." if cur.get("exact_expectation") else "Sampled report sequences."),
        )
        best = cur.get("best_player")
        s4.metric("Best guess", fmt_m(cur.get("best_m")), help=f"Player {best}" if best else None)
        st.caption(
            f"On the class's very reports the Bayes attacker's mean error is {fmt_m(cur.get('bayes_mean_m'))} "
            f"({cur.get('n_guesses')} of {cur.get('n_players')} students guessed)."
        )
        if cur.get("first_vote_guesses"):
            st.markdown(
                f"**Two votes.** The first vote's median error was {fmt_m(cur.get('first_vote_median_m'))} "
                f"({cur['first_vote_guesses']} guesses); after talking, {fmt_m(cur.get('class_median_m'))}. "
                f"{cur.get('n_changed', 0)} student{'' if cur.get('n_changed') == 1 else 's'} changed their guess."
            )
        if cur.get("pooled_n_reports"):
            st.markdown(class_as_attacker_sentence(cur))
    if CONTROLS and cur["status"] != "open":
        if cur["secret_mode"] != "each":
            seen = "the class has seen it" if summary_shown or cur.get("seen_in_round") else "not revealed yet"
            st.radio(
                "Next secret place",
                ["new", "same"],
                format_func={"new": "A new place", "same": f"This round's place again ({seen})"}.get,
                key="host_next_place",
                horizontal=True,
            )
        c1, c2 = st.columns([3, 2], vertical_alignment="bottom")
        eps_options = [0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0]
        default = min(eps_options, key=lambda e: abs(e - float(cur["epsilon_per_km"]) / 2))
        c1.select_slider("Next ε (1/km)", eps_options, value=default, key="host_next_eps")
        c2.button("Play again", type="primary", icon=":material/replay:", on_click=_act, args=("again",))

# ---------------------------------------------------------------------------------------------
# The rounds so far: the class's error against ε, and the table (CSV)
done = [r for r in hv.rounds if r.get("n_guesses") is not None]
if done:
    st.markdown("##### Rounds so far")
    labels = {m: v[0] for m, v in lesson_numbers.MECHANISMS.items()}
    t1, t2 = st.columns([3, 2])
    t1.dataframe(
        tables.rounds_styler(hv.rounds, labels),
        hide_index=True,
        width="stretch",
        column_config={
            c: st.column_config.TextColumn(alignment="right") for c in ("Guesses", *tables.ROUND_NUMBER_COLUMNS)
        },
    )
    fig = charts.class_rounds(
        done,
        {"class": MECHANISM_COLORS.get("em", "#000"), "bayes": MECHANISM_COLORS.get("laplace", "#555")},
    )
    t2.plotly_chart(fig, key="host_rounds_chart")
    st.caption(
        "Mean, median, best: the class's errors; Bayes: the Bayes attacker's expected error from the same secret "
        "places (road distances, metres); —: not revealed yet, or no guesses. Smaller ε: more privacy, so everyone's "
        "error grows."
    )
    if CONTROLS:
        st.download_button(
            "Rounds as CSV",
            round_csv.rounds_csv(hv),
            file_name=f"class-rounds-{hv.code}.csv",
            mime="text/csv",
            icon=":material/download:",
        )

with right:
    _lecturer_corner()
