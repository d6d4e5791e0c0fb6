"""Compare: PAnDA against the baseline mechanisms of the paper (section 4.3) on the same instance."""

import numpy as np
import pandas as pd
import streamlit as st

from app import analysis, charts, common, state

#: Dashboard name -> (registry name of panda.mechanisms.BASELINES, description).
METHODS = {
    "EM": ("em", "Exponential mechanism: Pr[y | x] ∝ exp(−ε d(x, y) / 2) over the outputs."),
    "EM+BR": ("em-br", "EM followed by Bayesian remapping to the output with the least expected cost."),
    "LP+CA": ("lp-ca", "Optimal LP over one representative per cell of a grid; each record uses its cell's row."),
    "Planar Laplace": ("laplace", "Geo-indistinguishability's planar Laplace noise, snapped to the nearest output."),
    "LP": ("lp", "The optimal ε-mDP mechanism over all records (Bordenabe et al. 2014): small K only."),
}
DEFAULT_METHODS = ["EM", "EM+BR", "LP+CA"]
#: The full LP is offered up to this K (it took about 4 s at K = 50 and over 15 s at K = 80 here).
MAX_K_FULL_LP = 60

st.title("Compare")
st.caption(
    "PAnDA and the baselines on the same records, outputs, users and ε. Every number is measured at the users' "
    "true records (uniform over the users), so the methods are compared on the same footing."
)
try:
    from panda.audit import audit_mechanism
    from panda.mechanisms import BASELINES
except ImportError as exc:
    st.info(
        "**The baseline mechanisms are not available in this installation** "
        f"(importing panda.mechanisms / panda.audit failed: {exc}). "
        "The Explore, Audit and Learn pages work without them."
    )
    st.stop()

params = common.current_params()
view = common.load_view(params)
if view is None:
    st.stop()
r, inst = view.result, view.instance
eps = params.epsilon_per_km

c1, c2, c3 = st.columns([3, 1, 1])
available = [m for m in METHODS if METHODS[m][0] in BASELINES]
chosen = c1.multiselect(
    "Baselines",
    available,
    default=[m for m in DEFAULT_METHODS if m in available],
    key="cmp_methods",
    help="\n".join(f"- **{m}**: {METHODS[m][1]}" for m in available),
)
grid = c2.selectbox("LP+CA grid", [8, 10, 6, 12], key="cmp_grid", help="Cells per side (paper: 8; its code: 10).")
time_limit = c3.slider(
    "LP time limit (s)", 5, 120, 20, step=5, key="cmp_time", help="LP-based baselines stop after this many seconds."
)
if "LP" in chosen and inst.n_records > MAX_K_FULL_LP:
    st.info(
        f"The full LP is only run for K ≤ {MAX_K_FULL_LP} records (it needs minutes beyond that); "
        f"this view has K = {inst.n_records}. Lower K in the sidebar to include it."
    )
    chosen = [m for m in chosen if m != "LP"]

users = r.user_records
d_users_km = inst.distances_km(users, users)
guess_m = 1000 * inst.distances_km(users, None)
pair_i, pair_j = np.triu_indices(users.size, k=1)

rows = []
# PAnDA: its released rows at the users with a surrogate; violations counted with Phase I's cost.
rows_idx = analysis.surrogate_rows(r)
ok = rows_idx >= 0
panda_row = {
    "method": f"PAnDA-{params.decay[0]}",
    "status": r.lp_status,
    "loss_m": float("nan"),
    "prior_loss_m": float("nan"),
    "violation_rate": r.user_pair_violation_rate,
    "epsilon_min_per_km": float("nan"),
    "adversary_error_m": float("nan"),
    "time_s": r.timings_s.get("total", float("nan")),
}
if r.z is not None and ok.sum() >= 1:
    z_users = r.z[rows_idx[ok]]
    m = analysis.mechanism_at_users(z_users, inst.cost_m[users[ok]], guess_m[ok])
    panda_row.update(loss_m=m["loss_m"], adversary_error_m=m["adversary_error_m"])
    if ok.sum() >= 2:
        sub = np.flatnonzero(ok)
        audit = audit_mechanism(z_users, d_users_km[np.ix_(sub, sub)], eps)
        panda_row["epsilon_min_per_km"] = audit.epsilon_min_per_km
rows.append(panda_row)

with st.status("Building the baselines ...", expanded=False) as status:
    done = []
    for name in chosen:
        key = METHODS[name][0]
        options: dict = {}
        if key == "lp-ca":
            options = {"grid": int(grid), "time_limit_s": float(time_limit)}
        elif key == "lp":
            options = {"time_limit_s": float(time_limit)}
        elif key == "laplace":
            options = {"rng": int(params.seed)}
        status.update(label=f"Building {name} ...")
        row = {
            "method": name,
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
            row["status"] = f"failed: {type(exc).__name__}: {exc}"
            rows.append(row)
            continue
        row.update(status=mech.status, prior_loss_m=mech.loss_m, time_s=mech.build_time_s)
        if mech.matrix is not None:
            at_users = mech.matrix[users]
            m = analysis.mechanism_at_users(at_users, inst.cost_m[users], guess_m)
            audit = audit_mechanism(at_users, d_users_km, eps)
            row.update(
                loss_m=m["loss_m"],
                adversary_error_m=m["adversary_error_m"],
                violation_rate=audit.violation_rate,
                epsilon_min_per_km=audit.epsilon_min_per_km,
            )
        rows.append(row)
        done.append(f"{name} {analysis.fmt_s(mech.build_time_s)}")
    status.update(
        label="Baselines ready" + (f": {', '.join(done)}" if done else " (none chosen)"),
        state="complete",
        expanded=False,
    )

table = pd.DataFrame(rows)
st.dataframe(
    table,
    hide_index=True,
    width="stretch",
    column_config={
        "method": st.column_config.TextColumn("Method"),
        "status": st.column_config.TextColumn("Status", help="'solved'/'Optimal', or why not."),
        "loss_m": st.column_config.NumberColumn(
            "Utility loss at users (m)",
            format="%.0f",
            help="Mean expected road-distance error at the users' true records.",
        ),
        "prior_loss_m": st.column_config.NumberColumn(
            "Loss over the prior (m)",
            format="%.0f",
            help="Expected loss over all K records under the prior. PAnDA has no row for records outside the "
            "anchor union, so it has none (empty cell).",
        ),
        "violation_rate": st.column_config.NumberColumn(
            "User pairs violating ε-mDP",
            format="percent",
            help="Baselines: exact audit of their rows at the users. PAnDA: its realised check, which also counts "
            "the Phase-I cost ε̄ of uploading the anchor set.",
        ),
        "epsilon_min_per_km": st.column_config.NumberColumn(
            "Smallest ε met (1/km)",
            format="%.2f",
            help="The smallest budget the released rows satisfy over the user pairs "
            "(for PAnDA without Phase I's cost).",
        ),
        "adversary_error_m": st.column_config.NumberColumn(
            "Adversary error (m)",
            format="%.0f",
            help="Expected error of the Bayes-optimal attacker who knows the mechanism and that the true record is "
            "one of the users'. Larger is more private.",
        ),
        "time_s": st.column_config.NumberColumn("Time (s)", format="%.3f", help="Wall time to build the mechanism."),
    },
)
with common.guarded("The comparison chart"):
    st.plotly_chart(charts.compare_bars(rows), key="chart_compare")
if r.empty_anchor_users.size:
    st.caption(
        f"PAnDA's numbers leave out the {r.empty_anchor_users.size} user(s) without anchors (they cannot report); "
        "the baselines use every user."
    )
