"""A student's phone in a class round: "Where was this report made?".

The join link (``/play?code=K7M2QX``) asks for one tap on *Join*; the page then keeps the student's token
in its address (``&me=...``), so a reload keeps them in the round with no login. The report was sampled on
the server; this page holds only the report, never the secret place, until the lecturer reveals.
"""

from __future__ import annotations

import secrets

import numpy as np
import streamlit as st

from app import client_address, state
from app.figures import game_maps
from app.game import polled_status, rounds
from app.model import landmarks, lesson_numbers
from app.model.panda_numbers import fmt_m
from panda import class_round

#: How often an open page asks whether the lecturer has revealed or started a new round, seconds.
POLL_S = 3.0
MAP_HEIGHT = 420

ss = st.session_state
# A minimal page: no sidebar, no navigation (a phone in a lecture hall).
st.html(
    "<style>[data-testid='stSidebar'], [data-testid='stExpandSidebarButton'] { display: none; }"
    ".block-container { padding-top: 3.2rem; max-width: 760px; }</style>"
)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _join_form(code: str) -> None:
    st.markdown("### Where was this report made?")
    st.caption("A class round of PAnDA Explorer: you get a report from a secret place and guess where it was made.")
    with st.form("join"):
        typed = st.text_input("Join code", value=code, max_chars=12, placeholder="K7M2QX")
        joined = st.form_submit_button("Join", type="primary", icon=":material/login:")
    if joined:
        try:
            # The join limit counts per client address (a phone cannot take a round's seats).
            token = rounds.join(typed, address=client_address.client_address())
        except rounds.GameError as exc:
            st.error(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 (never a traceback on a phone)
            st.error(f"Joining did not work ({type(exc).__name__}). Tap Join again in a moment.")
            return
        st.query_params.clear()
        st.query_params.update({"code": rounds.normalize_code(typed), "me": token})
        ss.pop("play_msg", None)
        st.rerun()


code = str(st.query_params.get("code", ""))[:64]
me = str(st.query_params.get("me", ""))[:64]
if not me:
    _join_form(code)
    st.stop()


def _draw(view: list, rnd) -> tuple[int, list[int]]:  # noqa: ANN001 (a Round)
    inst = state.instance(*view)
    mech = state.baseline(tuple(view), rnd.mechanism, rnd.epsilon_per_km, tuple(tuple(o) for o in rnd.options))
    if mech.matrix is None:
        raise rounds.GameError("This round's mechanism has no report for you yet: ask the lecturer to start again.")
    # A question round: every phone draws the same reports, with the round's seed.
    seed = getattr(rnd, "question_seed", None)
    rng = np.random.default_rng(secrets.randbits(128) if seed is None else seed)
    # The round's shared place, or one of the student's own, never a secret revealed to them in an earlier round.
    place = rnd.shared_place
    if place is None:
        place = rounds.draw_place(inst.prior, rnd.avoid_places, rng)
    return class_round.draw_entry(mech.matrix, inst.prior, rnd.n_reports, place, rng=rng)


try:
    with st.spinner("Getting your report ..."):
        pv = rounds.player_view(code, me, _draw)
except rounds.GameError as exc:
    st.error(str(exc))
    st.query_params.pop("me", None)
    st.link_button("Join with a code", "play", icon=":material/login:")
    st.stop()
except Exception as exc:  # noqa: BLE001 (never a traceback on a phone)
    st.error(f"The round could not be loaded ({type(exc).__name__}). Reload the page in a moment.")
    st.stop()

inst = state.instance(*pv.view)
net = state.network(pv.view[0])
label = lesson_numbers.MECHANISMS.get(pv.mechanism, (pv.mechanism,))[0]
k = pv.n_reports
st.markdown(f"### Round {pv.round_number}: where was {'this report' if k == 1 else 'this place'} made?")
st.caption(
    f"You are player {pv.player_number} · {label} at ε = {pv.epsilon_per_km:g}/km · "
    f"{k} report{'s' if k > 1 else ''} from one secret place · errors are road distances"
)


MAP_KEY = f"play_map_{pv.round_number}"  # a new chart per round: last round's selection does not carry over


def _tapped() -> None:
    sel = (ss.get(MAP_KEY) or {}).get("selection") or {}
    for obj in (sel.get("objects") or {}).get(game_maps.PLACES) or []:
        x = obj.get("x") if isinstance(obj, dict) else None
        if isinstance(x, int) and not isinstance(x, bool):
            try:
                ss.play_msg = ("ok", rounds.guess(code, me, x))
            except rounds.GameError as exc:
                ss.play_msg = ("no", str(exc))
            return
    # No place in the selection: a tap on empty map, or a second tap on the chosen place (which the map
    # deselects). The guess stands.
    if pv.guess is not None:
        ss.play_msg = ("ok", f"Already saved: your guess is place {pv.guess}. Tap another place to change it.")
    else:
        ss.play_msg = ("no", "That is off the map: tap inside the map, near the place you choose.")


def _timer_bar(left_s: float) -> None:
    """The seconds the lecturer gave, as a bar that empties on the phone itself (a CSS animation: no rerun a
    second per phone); the page redraws when the time is up (the polled status changes)."""
    if left_s <= 0:
        st.warning("**Time is up**: guesses are closed. The lecturer reveals in a moment.", icon=":material/timer_off:")
        return
    st.html(
        "<style>@keyframes panda-timer { from { width: 100%; } to { width: 0%; } }</style>"
        f"<div class='play-timer' role='timer' aria-label='{left_s:.0f} seconds left to guess'>"
        f"<b>{left_s:.0f} s left</b> to guess"
        "<div style='height:8px;background:#e6e6e6;border-radius:4px;margin-top:4px'>"
        f"<div style='height:8px;background:#b5432f;border-radius:4px;animation:panda-timer {left_s:.1f}s linear "
        "forwards'></div></div></div>"
    )


if pv.waiting:
    st.info(
        f"Round {pv.round_number} ended before you joined. Keep this page open: the next round starts here.",
        icon=":material/hourglass_top:",
    )
elif pv.secret is None and pv.status == "open":
    st.markdown(
        f"The white dot{'s are' if k > 1 else ' is'} what a phone reported. **Tap the place where you think "
        f"{'they were' if k > 1 else 'it was'} made**: anywhere on the map, the nearest place (blue dot) is your "
        "guess. You can change it until the lecturer reveals."
    )
    if pv.vote >= 2:
        st.info(
            "**Second vote.** Talk to your neighbour: do you agree? Then tap again, or keep your guess. The "
            "projector shows how many of you change.",
            icon=":material/forum:",
        )
    if pv.timer_left_s is not None:
        _timer_bar(pv.timer_left_s)
    kind, text = ss.get("play_msg") or ("", "")
    if kind == "ok":
        st.success(text, icon=":material/check_circle:")
    elif kind == "no":
        st.warning(text)
    elif pv.guess is not None:
        st.success(f"Your guess is saved: place {pv.guess}.", icon=":material/check_circle:")
elif pv.status == "scoring":
    st.info(
        "**Revealed.** The scores are being worked out: yours appears here in a moment.",
        icon=":material/hourglass_top:",
    )
elif pv.secret is not None:
    st.markdown(f"**Revealed.** The report{'s were' if k > 1 else ' was'} made at the orange place.")
    mine = fmt_m(pv.error_m) if pv.error_m is not None else "no guess"
    rank = f"{_ordinal(pv.rank)} of {pv.n_ranked}" if pv.rank else "—"
    # One line of three numbers (metrics would stack on a phone and push the map below the fold).
    st.html(
        "<div class='play-score' style='display:flex;gap:1.2rem;flex-wrap:wrap;font-size:0.95rem'>"
        f"<div>Your error<br><b style='font-size:1.5rem'>{mine}</b></div>"
        f"<div>Bayes attacker<br><b style='font-size:1.5rem'>{fmt_m(pv.bayes_error_m)}</b></div>"
        f"<div>Your rank<br><b style='font-size:1.5rem'>{rank}</b></div></div>"
    )
    summary = pv.summary or {}
    beat = pv.error_m is not None and pv.bayes_error_m is not None and pv.error_m < pv.bayes_error_m
    st.caption(
        f"The class's median error: {fmt_m(summary.get('class_median_m'))}. The Bayes attacker (blue) knows the "
        "mechanism and where people go, and on average is closer than any other guesser"
        + (": you beat it this time, by luck or by insight." if beat else ".")
    )
else:
    st.info(f"The lecturer closed round {pv.round_number}. Keep this page open for the next round.")

if not pv.waiting:
    segments, _ = state.road_segments(pv.view[0])
    deck = game_maps.student_deck(
        inst,
        segments,
        reports=pv.reports,
        guess=pv.guess,
        secret=pv.secret,
        bayes_place=pv.bayes_place,
        landmarks=landmarks.landmarks(pv.view[0], inst.lon, inst.lat),
        height_px=MAP_HEIGHT,
    )
    time_up = pv.timer_left_s is not None and pv.timer_left_s <= 0
    open_round = pv.status == "open" and pv.secret is None and not time_up
    st.pydeck_chart(
        deck,
        height=MAP_HEIGHT,
        key=MAP_KEY,
        on_select=_tapped if open_round else "ignore",
        selection_mode="single-object",
    )
    legend = game_maps.student_legend(k, guess=pv.guess, secret=pv.secret, bayes_place=pv.bayes_place)
    st.caption(f"{legend} · Map data {net.attribution}")


@st.fragment(run_every=POLL_S)
def _watch(seen: tuple[int, str, int, str]) -> None:
    """Reload the page when the lecturer reveals, closes or starts the next round, asks for a second vote or
    starts a timer, and when the time is up."""
    try:
        # One database read a second for all the server's phones; it is younger than this page's own read of the
        # round (POLL_S > polled_status.MAX_AGE_S), so a page never reloads on an answer older than itself.
        now = polled_status.status(code)
    except rounds.GameError:
        return
    if now != seen:
        ss.pop("play_msg", None)
        st.rerun(scope="app")


_timer = "off" if pv.timer_left_s is None else "running" if pv.timer_left_s > 0 else "up"
_watch((pv.round_number, pv.status, pv.vote, _timer))
