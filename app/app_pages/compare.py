"""Compare: PAnDA against the baseline mechanisms of the paper (section 4.3) on the same instance."""

import streamlit as st

from app import state
from app.figures import charts, tables
from app.model import lesson_numbers, panda_numbers
from app.model.messages import plain_error
from app.model.page_links import (
    BASELINE_IDS,
    COMPARE_TIME_LIMITS,
    DEFAULT_BASELINES,
    DEFAULT_COMPARE_TIME_S,
    DEFAULT_GRID,
    GRID_OPTIONS,
)
from app.widgets import current_view, sidebar
from app.widgets.current_view import job_failure
from panda.execution import JobError

_DESCRIPTIONS = {
    "EM": "Exponential mechanism: Pr[y | x] ∝ exp(−ε d(x, y) / 2) over the outputs.",
    "EM+BR": "EM followed by Bayesian remapping to the output with the least expected cost.",
    "LP+CA": "Optimal LP over one representative per cell of a grid; each record uses its cell's row.",
    "Planar Laplace": "Geo-indistinguishability's planar Laplace noise, snapped to the nearest output.",
    "Optimal LP": "The optimal ε-mDP mechanism over all records (Bordenabe et al. 2014), certified: the best "
    "exactly audited mechanism found within the time limit and a proven lower bound; its status states the gap.",
    "Paper's LP+BD": "What the paper ran as LP+BD: Benders on the LP constrained only between records closer than "
    "0.8 km, stopped at a 10 % gap or 100 iterations. A relaxation: not ε-mDP (the audit shows it).",
}
#: Dashboard name -> (registry name of panda.mechanisms.BASELINES, description); the link uses the registry name.
METHODS = {name: (key, _DESCRIPTIONS[name]) for name, key in BASELINE_IDS.items()}
#: The paper's names this page shows by the Lesson's ("LP on cells", not "LP+CA"); "EM" and "Optimal LP" read
#: the same on both pages.
RENAMED = ("EM+BR", "LP+CA")
#: Dashboard name (the link's and the session's) -> the name shown on this page.
LABELS = {name: lesson_numbers.MECHANISMS[key][0] if name in RENAMED else name for name, key in BASELINE_IDS.items()}


def _paper_name(name: str) -> str:
    """ " (the paper's LP+CA)" when the page shows the Lesson's name instead of the paper's, else ""."""
    return f" (the paper's {name})" if name in RENAMED else ""


DEFAULT_METHODS = list(DEFAULT_BASELINES)
#: The optimal LP is offered up to this K (beyond it one round of its LP can outlast any time limit here).
MAX_K_FULL_LP = 1000

st.title("Compare")
st.caption(
    "PAnDA and the baselines on the same records, outputs, users and ε. Every number is measured at the users' "
    "true records (uniform over the users), so the methods are compared on the same footing. "
    f"Loss: **{current_view.current_params().loss_label}** (in metres; *Loss* in the sidebar). "
    "The names are the Lesson's: " + ", ".join(f"{LABELS[n]} is the paper's {n}" for n in RENAMED) + "."
)
try:
    from panda.mechanisms import BASELINES
except ImportError as exc:
    st.info(
        "**The baseline mechanisms are not available in this installation.** "
        "The Explore, Audit and Learn pages work without them."
    )
    st.caption(f"Details: {exc}")
    st.stop()

params = current_view.current_params()
view = current_view.load_view(params)
if view is None:
    st.stop()
r, inst = view.result, view.instance
eps = params.epsilon_per_km

available = [m for m in METHODS if METHODS[m][0] in BASELINES]
# The page's own state (also in the link: app.model.page_links.PAGE_QUERY), validated before the widgets.
ss = st.session_state
if not isinstance(ss.get("cmp_methods"), list):
    ss.cmp_methods = [m for m in DEFAULT_METHODS if m in available]
ss.cmp_methods = [m for m in ss.cmp_methods if m in available]
if ss.get("cmp_grid") not in GRID_OPTIONS:
    ss.cmp_grid = DEFAULT_GRID
if ss.get("cmp_time") not in COMPARE_TIME_LIMITS:
    ss.cmp_time = DEFAULT_COMPARE_TIME_S
sidebar.write_query(params)
# The baselines on a row of their own: the Lesson's names ("EM + remap", "LP on cells") need the width.
chosen = st.multiselect(
    "Baselines",
    available,
    key="cmp_methods",
    persist_state="session",
    format_func=LABELS.get,
    help="\n".join(f"- **{LABELS[m]}**{_paper_name(m)}: {METHODS[m][1]}" for m in available),
)
c2, c3, _ = st.columns([1, 1, 2])
grid = c2.selectbox(
    "LP on cells: grid",
    list(GRID_OPTIONS),
    key="cmp_grid",
    persist_state="session",
    help="LP on cells (the paper's LP+CA): cells per side (paper: 8; its code: 10).",
)
time_limit = c3.slider(
    "LP time limit (s)",
    COMPARE_TIME_LIMITS[0],
    COMPARE_TIME_LIMITS[-1],
    step=5,
    key="cmp_time",
    persist_state="session",
    help="LP-based baselines stop after this many seconds.",
)
if "Optimal LP" in chosen and inst.n_records > MAX_K_FULL_LP:
    st.info(
        f"The optimal LP is only run for K ≤ {MAX_K_FULL_LP} records (beyond, one round of it can take longer "
        f"than any time limit here); this view has K = {inst.n_records}. Lower K in the sidebar to include it."
    )
    chosen = [m for m in chosen if m != "Optimal LP"]

users = r.user_records
items = state.config_items(view.config)


def _numbers(row: dict, method: str, options: tuple, **panda_run) -> None:
    """Fill ``row`` with a method's numbers at the users' records: a worker's job, cached for every session.

    A failed job leaves the numbers out and says why in the row's detail (never a traceback).
    """
    try:
        numbers = state.users_numbers(params.instance_key, method, eps, options, **panda_run)
    except Exception as exc:  # noqa: BLE001 (one method's numbers must not take the page down)
        why = job_failure(exc)[0] if isinstance(exc, JobError) else plain_error(exc)[0]
        row["note"] = "; ".join(t for t in (row.get("note"), f"numbers not measured: {why}") if t)
        return
    if numbers is not None:
        row.update(numbers)


rows = []
# PAnDA: its released rows at the users with a surrogate; violations counted with Phase I's cost.
ok = panda_numbers.surrogate_rows(r) >= 0
panda_row = {
    "method": f"PAnDA-{params.decay[0]}",
    "status": r.lp_status,
    "loss_m": float("nan"),
    "prior_loss_m": float("nan"),
    "violation_rate": r.user_pair_violation_rate,
    "epsilon_min_per_km": float("nan"),
    "adversary_error_m": float("nan"),
    "time_s": r.timings_s.get("total", float("nan")),
    "note": f"{int(ok.sum())} of {users.size} users can report" if not ok.all() else "",
}
if r.z is not None and ok.sum() >= 1:
    with st.spinner("Measuring PAnDA at the users' records ..."):
        _numbers(panda_row, "panda", (), items=items, seed=int(params.seed))
    # PAnDA's violations are its realised check (with Phase I's cost), not the audit of its rows.
    panda_row["violation_rate"] = r.user_pair_violation_rate
rows.append(panda_row)

with st.status("Building the baselines ...", expanded=False) as status:
    done = []
    for name in chosen:
        key = METHODS[name][0]
        options: dict = {}
        if key == "lp-ca":
            options = {"grid": int(grid), "time_limit_s": float(time_limit)}
        elif key in ("lp", "lp-bd"):
            options = {"time_limit_s": float(time_limit)}
        elif key == "laplace":
            options = {"rng": int(params.seed)}
        status.update(label=f"Building {LABELS[name]} ...")
        row = {
            "method": LABELS[name],
            "status": "",
            "loss_m": float("nan"),
            "prior_loss_m": float("nan"),
            "violation_rate": float("nan"),
            "epsilon_min_per_km": float("nan"),
            "adversary_error_m": float("nan"),
            "time_s": float("nan"),
        }
        try:
            mech = state.baseline(params.instance_key, key, eps, tuple(sorted(options.items())))
        except Exception as exc:  # one failing baseline must not take the page down
            row["status"] = f"failed: {plain_error(exc)[0]}"
            rows.append(row)
            continue
        row.update(status=mech.status, prior_loss_m=mech.loss_m, time_s=mech.build_time_s)
        if mech.matrix is not None:
            status.update(label=f"Measuring {LABELS[name]} at the users' records ...")
            _numbers(row, key, tuple(sorted(options.items())))
        rows.append(row)
        done.append(f"{LABELS[name]} {panda_numbers.fmt_s(mech.build_time_s)}")
    status.update(
        label="Baselines ready" + (f": {', '.join(done)}" if done else " (none chosen)"),
        state="complete",
        expanded=False,
    )

table = tables.compare_frame(rows)
# A static table: every cell readable (text wraps, nothing cut off), "—" and words for missing numbers.
st.table(tables.compare_styler(table), hide_index=True)
with st.expander("What the columns mean"):
    st.markdown("\n".join(f"- **{tables.HEADERS[k]}**: {text}" for k, text in tables.COLUMN_HELP.items()))
notes = tables.compare_notes(table)
if notes:
    st.caption("  \n".join(notes))
with current_view.guarded("The comparison chart"):
    st.plotly_chart(charts.compare_bars(rows), key="chart_compare")
if r.empty_anchor_users.size:
    st.caption(
        f"PAnDA's numbers leave out the {r.empty_anchor_users.size} user(s) without anchors (they cannot report); "
        "the baselines use every user."
    )
