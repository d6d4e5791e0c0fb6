"""Plan: which ε for the error people can accept? The answer, its risks, the exposure map and the files to forward.

A stakeholder enters the expected error they can tolerate (metres), the reports a person sends a day and, if they
like, the least error the attacker must be left with. :func:`panda.plan.plan` (on a worker, cached for every session)
finds each mechanism's most private ε meeting the error, and the page says which choice leaves the attacker the
most to guess, with the risk in plain terms, the search as a chart, every place on a map and the numbers as GIS
files.
"""

import pandas as pd
import streamlit as st

from app import page_jobs, state
from app.figures import maps
from app.figures.plan_charts import exposure_deck, plan_figure
from app.model import plan_numbers
from app.model.landmarks import place_labels
from app.model.page_links import DEFAULT_TARGET_M, PLAN_PER_DAY_RANGE, PLAN_TARGET_RANGE_M
from app.plan_jobs import PLAN_LP_LIMIT_S, planned
from app.widgets import current_view, plan_downloads, sidebar
from panda.execution import JobError
from panda.instance import InstanceTooLargeError

#: The map's height on the page, pixels.
MAP_HEIGHT = 460

st.title("Plan: which ε for the error you can accept?")
st.caption(
    "Say how far from the truth a report may land on average, and the planner finds, for each mechanism, the "
    "most private ε that still keeps to it, then what the best attacker learns there. Every number is computed "
    "exactly on the view in the sidebar (its city, places and loss)."
)
params = current_view.current_params()
try:
    inst = state.instance(*params.instance_key)
except InstanceTooLargeError as exc:
    current_view.show_error("This view is too large for the dashboard.", exc)
    st.stop()
except Exception as exc:  # noqa: BLE001 (a sentence on the page, never a traceback)
    current_view.show_error("Could not prepare the problem instance.", exc, "Try fewer places (K) or another map.")
    st.stop()

ss = st.session_state
# The page's own state (also in the link: app.model.page_links.PAGE_QUERY), validated before the widgets.
low_m, high_m = PLAN_TARGET_RANGE_M
if not isinstance(ss.get("plan_target_m"), int) or not low_m <= ss.plan_target_m <= high_m:
    ss.plan_target_m = DEFAULT_TARGET_M
if not isinstance(ss.get("plan_floor_m"), int) or not low_m <= ss.plan_floor_m <= high_m:
    ss.plan_floor_m = 0
if not isinstance(ss.get("plan_per_day"), int) or not PLAN_PER_DAY_RANGE[0] <= ss.plan_per_day <= PLAN_PER_DAY_RANGE[1]:
    ss.plan_per_day = 1
if not isinstance(ss.get("plan_lp"), bool):
    ss.plan_lp = False
sidebar.write_query(params)

c = st.columns([1, 1, 1, 1.2])
target = c[0].number_input(
    "Tolerable expected error (m)",
    min_value=low_m,
    max_value=high_m,
    step=50,
    key="plan_target_m",
    persist_state="session",
    help="How far, on average over the people, a report may land from their true place "
    f"({plan_numbers.LOSS_WORDS.get(inst.loss, inst.loss)}: the sidebar's loss).",
)
per_day = c[1].number_input(
    "Reports per person per day",
    min_value=PLAN_PER_DAY_RANGE[0],
    max_value=PLAN_PER_DAY_RANGE[1],
    step=1,
    key="plan_per_day",
    persist_state="session",
    help="288 is one report every 5 minutes. k independent reports spend k·ε a day and let the attacker combine them.",
)
floor = c[2].number_input(
    "Attacker's error at least (m)",
    min_value=low_m,
    max_value=high_m,
    step=50,
    key="plan_floor_m",
    persist_state="session",
    help="The least error the best attacker should be left with (0: no floor). Each answer says whether it holds.",
)
certify = c[3].toggle(
    "Certify with the optimal LP",
    key="plan_lp",
    persist_state="session",
    help="Adds the optimal mechanism, with a proof that no ε-mDP mechanism meets the error below its ε. It takes "
    f"about a minute on the default view (each step a solve of up to {PLAN_LP_LIMIT_S:.0f} s).",
)
methods = ("laplace", "em", "lp") if certify else ("laplace", "em")

progress = st.empty()


def on_progress(phase: str, fraction: float) -> None:
    progress.progress(min(max(fraction, 0.0), 1.0), text=f"Planning: {phase.replace('planning ', '')} ...")


try:
    result = page_jobs.call_with_progress(
        planned,
        params.instance_key,
        float(target),
        methods,
        int(per_day),
        float(floor) if floor > 0 else None,
        on_progress=on_progress,
    )
except JobError as exc:
    progress.empty()
    headline, hint = current_view.job_failure(exc)
    current_view.show_error(headline, exc, hint)
    st.stop()
except Exception as exc:  # noqa: BLE001
    progress.empty()
    current_view.show_error("The planner could not run on this view.", exc, "Try another tolerable error.")
    st.stop()
progress.empty()

st.markdown(f"#### {plan_numbers.answer_sentence(result)}")
best = plan_numbers.best_plan(result)
if result.attacker_floor_m is not None:
    held = [plan_numbers.PLAN_METHODS[m.method] for m in result.mechanisms if m.meets_attacker_floor]
    st.caption(
        f"Attacker's error at least {result.attacker_floor_m:,.0f} m: "
        + (f"holds for {', '.join(held)}." if held else "holds for none of the planned mechanisms: accept more error.")
    )

st.subheader("Each mechanism at its most private ε")
table = pd.DataFrame(plan_numbers.table_rows(result))
st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    column_config={
        "ε (1/km)": st.column_config.NumberColumn(format="%.3g"),
        "ε a day (1/km)": st.column_config.NumberColumn(format="%.3g"),
        "expected error (m)": st.column_config.NumberColumn(format="%.0f"),
        "attacker's error (m)": st.column_config.NumberColumn(format="%.0f"),
        "worst-off 10 %: attacker's error (m)": st.column_config.NumberColumn(format="%.0f"),
    },
)
notes = [
    f"**{plan_numbers.PLAN_METHODS[m.method]}**: {m.search}." + (f" {m.note}" if m.note else "")
    for m in result.mechanisms
]
st.caption(
    "A smaller ε is more private for one mechanism, not across mechanisms: compare the attacker's error. "
    f"No mechanism over these {inst.n_outputs} outputs can go below {result.reachable_m:,.0f} m (every place "
    "reported as its nearest output). " + " ".join(notes)
)

labels = place_labels(params.source, inst.lon, inst.lat)
segments, _ = state.road_segments(params.source)
left, right = st.columns([1, 1], gap="medium")
with left, current_view.guarded("The planner's chart"):
    st.plotly_chart(plan_figure(result), key="plan_chart")
with right, current_view.guarded("The exposure map"):
    mapped_options = [m.method for m in result.mechanisms if m.risk is not None]
    if not mapped_options:
        st.info("No mechanism meets the error here, so there is no exposure to map.")
        mapped = ""
    else:
        default = best.method if best is not None else mapped_options[0]
        mapped = st.selectbox(
            "Exposure map of",
            mapped_options,
            index=mapped_options.index(default),
            format_func=plan_numbers.PLAN_METHODS.get,
            # One key per question: a new answer shows its own best mechanism, not the last question's.
            key=f"plan_mapped_{abs(hash((params.instance_key, target, per_day, floor, methods)))}",
        )
        plan = result.of(mapped)
        st.pydeck_chart(
            exposure_deck(inst, plan, labels, roads=maps.roads_layer(segments), height_px=MAP_HEIGHT),
            height=MAP_HEIGHT,
            key="plan_map",
        )
        st.caption(
            "Each place coloured by the attacker's expected error there at "
            f"ε = {plan_numbers.fmt_eps(plan.epsilon_per_km)}, by rank: the darker, the closer the attacker's guess "
            f"({plan.risk.place_error_m.min():,.0f} m at the darkest, {plan.risk.place_error_m.max():,.0f} m at the "
            "palest). "
            f"Ringed: the worst-off 10 % (attacker's error at most {plan.risk.worst_share_threshold_m:,.0f} m)."
        )

if mapped:
    st.subheader("Take it with you")
    plan_downloads.plan_downloads(result, inst, params, labels, segments, mapped)
