"""The shared sidebar: road network, instance and PAnDA controls; the view's URL round-trip.

At the first run of a session the widgets are initialised from ``st.query_params``; afterwards the
widgets are the truth and :func:`write_query` puts the current view back into the URL.
"""

from __future__ import annotations

import dataclasses

import streamlit as st

import panda
from app import state
from app.model.messages import plain
from app.model.page_links import page_query, read_page_query
from app.model.params import (
    BBOX_PRESETS,
    DECAY_LABELS,
    DEFAULT_PAGE_LOSS,
    DELTA_OPTIONS,
    GAMMA_OPTIONS,
    LOSS_OPTIONS,
    LOSS_SHORT,
    PRESET_OPTIONS,
    PRIOR_OPTIONS,
    RADIUS_OPTIONS,
    RANGES,
    Params,
    from_query,
    parse_source,
    preset_values,
    to_query,
)
from app.widgets import area_picker, network_controls
from app.widgets.network_controls import CUSTOM_BOX, SOURCE_BBOX, SOURCE_CITY
from panda.instance import LOSS_LABELS

__all__ = ["render", "write_query", "PRESET_WIDGETS", "PRESET_HELP"]


#: The widget (session-state key) of each field a preset sets (every one of app.model.params.PRESET_FIELDS).
PRESET_WIDGETS = {
    "delta": "w_delta",
    "alpha": "w_alpha",
    "lambda_per_km": "w_lambda",
    "gamma_km": "w_gamma",
    "neighbourhood_size": "w_Gamma",
    "constraint_radius_km": "w_radius",
}

_REC = panda.preset("recommended")
#: The preset radio's help (the recommended sentence matches README.md's section on that preset).
PRESET_HELP = (
    "Picking a preset moves every control below except ε and the decay to the preset's values; you can "
    "move them afterwards. "
    "**artifact**: what the authors' published experiments did (rescaled decay, a tiny selection "
    "probability beyond γ, LP constraints only between anchors closer than 800 m): fast. "
    "**paper**: the paper's text (every anchor pair constrained, the far value h(γ)): exact but "
    "each user picks about half of the records as anchors. "
    "**recommended**: the lowest-loss setting of a sweep (experiments/recommend_sweep.py) whose exactly "
    f"audited violation probability stayed within δ = {_REC.delta:g} on Neubrandenburg and Liechtenstein "
    "(K = 200, ε = 5/km, seeds 0 and 1), but not everywhere: 12 % of user pairs on Kotka (seed 0) and "
    "16-36 % on the dense Helsinki centre exceeded δ (experiments/results/recommend_check.csv); "
    f"its tiny γ = {_REC.gamma_km * 1000:g} m makes each user upload most of the records."
)
_FAR_RULE = {"h_gamma": "h(γ)", "floor": "a constant floor", "artifact": "the published code's floor"}


def _fmt_km(value: float | None, none: str) -> str:
    if value is None:
        return none
    return f"{value * 1000:.0f} m" if value < 1 else f"{value:g} km"


def _fmt_delta(value: float) -> str:
    return f"{value:.0e}".replace("e-0", "e-") if value < 0.01 else f"{value:g}"


def _init_state() -> None:
    """Fill the widgets' session state from the URL, once per session."""
    ss = st.session_state
    if ss.get("_initialised"):
        return
    p, problems = from_query(st.query_params.to_dict())
    kind, value = parse_source(p.source)
    ss.w_source_kind = {"city": SOURCE_CITY, "file": area_picker.SOURCE_FILE}.get(kind, SOURCE_BBOX)
    ss.w_city = value if kind == "city" else panda.DEFAULT_CITY
    box = value if kind == "bbox" else BBOX_PRESETS["Rome (the paper's box)"]
    ss.w_box_preset = next((k for k, v in BBOX_PRESETS.items() if v == box), CUSTOM_BOX)
    ss.w_west, ss.w_south, ss.w_east, ss.w_north = (float(v) for v in box)  # type: ignore[union-attr]
    ss.active_source = p.source
    ss.net_error, ss.net_error_details = None, ""
    ss.w_K, ss.w_N, ss.w_M, ss.w_seed = p.n_records, p.n_users, p.n_outputs, p.seed
    ss.w_decay, ss.w_preset = p.decay, p.preset
    ss.w_epsilon_per_km, ss.w_delta = p.epsilon_per_km, p.delta
    ss.w_alpha, ss.w_lambda, ss.w_gamma = p.alpha, p.lambda_per_km, p.gamma_km
    ss.w_Gamma, ss.w_radius = p.neighbourhood_size, p.constraint_radius_km
    ss.w_lb, ss.w_lbtime = p.lower_bound, p.lp_time_limit_s
    ss.w_loss, ss.w_tasks, ss.w_prior = p.loss, p.n_tasks, p.prior
    # The pages' own state in the link (app.model.page_links.PAGE_QUERY): the pages validate it against their run.
    page_values, page_problems = read_page_query(st.query_params.to_dict())
    for key, value in page_values.items():
        ss[key] = value
    ss.query_problems = problems + page_problems
    ss._initialised = True


def _on_preset_change() -> None:
    """A preset moves the controls it defines to its own values (read from ``panda.preset``)."""
    ss = st.session_state
    for field, value in preset_values(ss.w_preset).items():
        ss[PRESET_WIDGETS[field]] = value


def _preset_fixed(name: str) -> str:
    """What a preset decides that no control shows (to_config takes it from the preset)."""
    c = panda.preset(name)
    far = _FAR_RULE[c.far_rule] + (f" = {c.far_floor:g}" if c.far_rule == "floor" else "")
    auto = "d_max / " + (f"{c.gamma_divisor:g}" if c.gamma_divisor is not None else "div(K) (published table)")
    return (
        f"Also set by the **{name}** preset: beyond γ {far}; "
        f"{'Table 1 selection' if c.selection_form == 'paper' else 'rescaled (published code) selection'}; "
        f"γ auto = {auto}; Bayes adjustment (eq. 30) {'on' if c.bayes_adjustment else 'off'}; "
        f"unreachable 1 − δ: {'rows forced identical' if c.margin_fallback == 'infinite' else 'second-largest margin'}."
    )


def _clamp(key: str, low: float, high: float) -> None:
    """Keep a number widget's value in ``[low, high]``, remembering the value the person chose.

    A smaller city clamps K (Kotka has 224 nodes); switching back to a larger one restores the
    K the person had asked for instead of keeping the clamped value.
    """
    ss = st.session_state
    wanted, shown = f"_{key}_wanted", f"_{key}_shown"
    if ss.get(shown) != ss[key] or wanted not in ss:  # set by the person, a preset or a link
        ss[wanted] = ss[key]
    ss[key] = type(ss[key])(min(max(ss[wanted], low), high))
    ss[shown] = ss[key]


def _loss_help(page_loss: str) -> str:
    return (
        "What a report costs the person who makes it, in metres: the loss every optimising mechanism minimises "
        "(the optimal LP, LP on cells, LP+EM, PAnDA's LP, EM's remapping) and every number, ring and curve "
        "reports.\n"
        "- **Road distance to the report**: how far the report is from the place along the roads.\n"
        "- **Straight-line distance**: as the crow flies (the geo-indistinguishability literature's loss).\n"
        "- **The paper's task cost**: how much the report changes the road distance to a service's tasks, "
        "|road(task, place) − road(task, report)|; with one task (the paper's setup) a report at the same road "
        "distance from the task is free, however far from the place.\n\n"
        f"*This page's default* here: {LOSS_LABELS[page_loss]}."
    )


def _prior_label(value: str) -> str:
    if value.startswith("csv:"):
        return f"Your uploaded places ({value.partition(':')[2][:6]})"
    return PRIOR_OPTIONS.get(value, value)


def _places_uploaded() -> None:
    """A places file was uploaded: keep it, check it against the network, make it the prior."""
    ss = st.session_state
    upload = ss.get("w_places")
    ss.places_note, ss.places_error = None, None
    if upload is None:
        return
    try:
        file_id, places = panda.priors.save_places_upload(upload.getvalue(), filename=str(upload.name)[:200])
        snap = panda.snap_places(state.network(ss.active_source), places.lon, places.lat, weights=places.weight)
    except ValueError as exc:
        ss.places_error = f"**These places cannot be used.** {plain(str(exc))} The prior stays as it was."
        return
    if snap.n_snapped == 0:
        ss.places_error = (
            f"**None of the {places.lon.size:,} places is within {snap.max_snap_m:,.0f} m of a road of this map.** "
            "Check that the file's places lie in the area shown (lat and lon not swapped). The prior stays as it was."
        )
        return
    ss.w_prior = f"csv:{file_id}"
    dropped = (
        f"; {snap.n_dropped:,} farther than {snap.max_snap_m:,.0f} m from every road left out" if snap.n_dropped else ""
    )
    ss.places_note = f"{snap.n_snapped:,} places snapped to the roads{dropped}."


def _prior_controls(net: panda.RoadNetwork) -> None:
    """The prior: named ones, the city's points of interest where shipped, or the person's own places."""
    ss = st.session_state
    has_pois = net.name in panda.list_poi_cities()
    if ss.w_prior == "poi" and not has_pois:
        ss.w_prior = "road_density"
        ss.places_note = "This map has no points of interest shipped: road density stands in for them."
    if ss.w_prior.startswith("csv:") and not panda.priors.has_places_upload(ss.w_prior.partition(":")[2]):
        ss.w_prior = "uniform"
        ss.places_error = (
            "**The uploaded places of this link are not kept on this server** (uploaded elsewhere, or removed to make "
            "room): the prior is uniform. Upload the file again below."
        )
    options = [k for k in PRIOR_OPTIONS if k != "poi" or has_pois]
    if ss.w_prior.startswith("csv:"):
        options.append(ss.w_prior)
    st.selectbox(
        "Prior (where people are)",
        options,
        key="w_prior",
        format_func=_prior_label,
        help="How likely each place is before any report: the optimising mechanisms weigh places by it, and the "
        "attacker uses it as background knowledge. Geo-indistinguishability does not depend on it; the attacker's "
        "error does. Points of interest: OpenStreetMap amenities, shops and offices of the embedded cities.",
    )
    st.file_uploader(
        "Your own places (CSV of lat, lon, weight; GeoJSON, GeoPackage or zipped shapefile)",
        type=["csv", "txt", "geojson", "json", "gpkg", "zip"],
        key="w_places",
        max_upload_size=2,
        on_change=_places_uploaded,
        help="Places where people go (a survey, check-ins, your own): each is snapped to the nearest road and they "
        "become the prior. They do not become the secret places: the mechanism still protects every place of the "
        "map, whatever the prior. At most 2 MB and 20,000 places. CSV: comma or semicolon separated. GIS files: "
        "GeoJSON, GeoPackage or a zipped shapefile of points in any coordinate system (an optional 'weight' "
        "attribute); lines and polygons are not read.",
    )
    if ss.get("places_error"):
        st.error(ss.places_error)
    elif ss.get("places_note"):
        st.caption(ss.places_note)


def render(*, page_loss: str = DEFAULT_PAGE_LOSS, fold_expert: bool = False) -> Params:
    """Draw the sidebar and return the current view (``page_loss``: the shown page's default loss).

    ``fold_expert``: PAnDA's parameters and the lower bound's go under a closed "Expert settings" (the Lesson:
    a class sets the city, the places and the loss; PAnDA's parameters belong to the PAnDA page)."""
    _init_state()
    with st.sidebar:
        st.toggle(
            "Presenter view",
            key="w_present",
            help="For a projector: the sidebar starts collapsed and the type is larger (the link gets ?present=1).",
        )
        net = network_controls.render()
        st.caption(f"{net.n_nodes:,} nodes, {net.n_edges:,} road segments. {panda.OSM_ATTRIBUTION}")
        _instance_controls(net, page_loss, fold_expert=fold_expert)
        with st.expander("Expert settings: PAnDA's parameters") if fold_expert else st.container():
            _panda_controls()
            _lower_bound_controls()
    network_controls.show_link_notice()
    if area_picker.show_pending_box():  # the link's box was just downloaded: draw the page with it
        st.rerun()
    return _params_from_widgets(page_loss)


def _instance_controls(net: panda.RoadNetwork, page_loss: str, *, fold_expert: bool = False) -> None:
    """The instance: how many records, users and outputs, the seed, the loss and the prior (``fold_expert``:
    users, outputs and seed under a closed expander, as on the Lesson)."""
    ss = st.session_state
    st.header("Instance")
    k_max = int(min(RANGES["n_records"][1], net.n_nodes))
    _clamp("w_K", min(RANGES["n_records"][0], k_max), k_max)
    st.number_input(
        "Secret records K",
        min_value=int(min(RANGES["n_records"][0], k_max)),
        max_value=k_max,
        step=50,
        key="w_K",
        help="How many road-network nodes make up the secret domain: the places a user can be.",
    )
    _clamp("w_N", 2, min(RANGES["n_users"][1], ss.w_K))
    _clamp("w_M", 1, min(RANGES["n_outputs"][1], ss.w_K))
    with st.expander("Expert settings: users, outputs, seed") if fold_expert else st.container():
        _draw_controls()
    st.selectbox(
        "Loss (what a report costs)",
        list(LOSS_OPTIONS),
        key="w_loss",
        format_func=lambda k: LOSS_OPTIONS[k] + (f" ({LOSS_SHORT[page_loss]})" if k == "auto" else ""),
        help=_loss_help(page_loss),
    )
    resolved = page_loss if ss.w_loss == "auto" else ss.w_loss
    if resolved == "task":
        st.number_input(
            "Tasks in the task cost",
            min_value=int(RANGES["n_tasks"][0]),
            max_value=int(RANGES["n_tasks"][1]),
            step=1,
            key="w_tasks",
            help="How many tasks (random places a service sends people to) the task cost averages over. "
            "The paper uses one.",
        )
    _prior_controls(net)


def _draw_controls() -> None:
    """How many users and outputs are drawn, and the seed of the draws."""
    ss = st.session_state
    c1, c2 = st.columns(2)
    c1.number_input(
        "Users N",
        min_value=2,
        max_value=int(min(RANGES["n_users"][1], ss.w_K)),
        step=5,
        key="w_N",
        help="How many users report a perturbed location (each at a different record).",
    )
    c2.number_input(
        "Outputs",
        min_value=1,
        max_value=int(min(RANGES["n_outputs"][1], ss.w_K)),
        step=10,
        key="w_M",
        help="How many records may be reported (the output set Y, drawn from the records).",
    )
    st.number_input(
        "Seed",
        min_value=0,
        max_value=int(RANGES["seed"][1]),
        step=1,
        key="w_seed",
        help="Random seed of the records, users and anchor draws: the same seed gives the same view.",
    )


def _panda_controls() -> None:
    """PAnDA's parameters: the decay, the preset, ε, δ, α, λ, γ, Γ and the LP's constraint radius."""
    ss = st.session_state
    st.header("PAnDA")
    st.selectbox(
        "Anchor selection (decay)",
        list(DECAY_LABELS),
        key="w_decay",
        format_func=DECAY_LABELS.get,
        help="How fast the chance of picking a record as an anchor falls with its distance from the user.",
    )
    st.radio(
        "Preset",
        PRESET_OPTIONS,
        key="w_preset",
        horizontal=True,
        on_change=_on_preset_change,
        help=PRESET_HELP,
    )
    st.caption(_preset_fixed(ss.w_preset))
    st.slider(
        "Privacy budget ε (1/km)",
        *RANGES["epsilon_per_km"],
        step=0.5,
        key="w_epsilon_per_km",
        help="How distinguishable two places may be: for two records 1 km apart, the chance of any output may "
        "differ by at most a factor e^ε (for 200 m apart, e^(ε/5)). Smaller is more private.",
    )
    st.select_slider(
        "Failure probability δ",
        options=DELTA_OPTIONS,
        key="w_delta",
        format_func=_fmt_delta,
        help="PAnDA promises the ε guarantee for a pair of users with probability at least 1 − δ (log scale).",
    )
    st.slider(
        "Selection scale α",
        *RANGES["alpha"],
        step=0.01,
        key="w_alpha",
        help="The chance that the user's own record becomes an anchor (selection probability at 0 m).",
    )
    st.slider(
        "Decay rate λ (1/km)",
        *RANGES["lambda_per_km"],
        step=0.05,
        key="w_lambda",
        help="How quickly the selection probability falls with distance (per km); larger = fewer, closer anchors.",
    )
    st.select_slider(
        "Threshold distance γ",
        options=GAMMA_OPTIONS,
        key="w_gamma",
        format_func=lambda g: _fmt_km(g, "auto"),
        help="Records farther than γ from the user get one small constant selection probability. "
        "'auto' uses the preset's rule (the largest distance divided by 50 or by the published table).",
    )
    st.slider(
        "Neighbourhood size Γ",
        *RANGES["neighbourhood_size"],
        step=1,
        key="w_Gamma",
        help="For each anchor the server considers its Γ nearest records as where the user may truly be "
        "when it sizes the safety margin.",
    )
    st.select_slider(
        "LP constraint radius",
        options=RADIUS_OPTIONS,
        key="w_radius",
        format_func=lambda r: _fmt_km(r, "all pairs"),
        help="Constrain only anchor pairs closer than this (the published experiments: 800 m); "
        "'all pairs' is the paper's definition and what the privacy guarantee needs.",
    )


def _lower_bound_controls() -> None:
    """Whether to solve the Relaxed AnPO lower bound, and its time limit."""
    ss = st.session_state
    st.toggle(
        "Compute the lower bound",
        key="w_lb",
        help="Also solve the Relaxed AnPO LP (no Phase-I cost, no margin): the best utility any mechanism on "
        "these anchors could reach. It can be slow on dense settings; it has its own time limit.",
    )
    st.slider(
        "Lower-bound time limit (s)",
        *RANGES["lp_time_limit_s"],
        step=1.0,
        key="w_lbtime",
        disabled=not ss.w_lb,
        help="The lower-bound LP stops after this many seconds and is then shown as 'time limit'.",
    )


def _params_from_widgets(page_loss: str) -> Params:
    """The view the sidebar's widgets hold."""
    ss = st.session_state
    return Params(
        source=ss.active_source,
        n_records=int(ss.w_K),
        n_users=int(ss.w_N),
        n_outputs=int(ss.w_M),
        seed=int(ss.w_seed),
        decay=ss.w_decay,
        preset=ss.w_preset,
        epsilon_per_km=float(ss.w_epsilon_per_km),
        delta=float(ss.w_delta),
        alpha=float(ss.w_alpha),
        lambda_per_km=float(ss.w_lambda),
        gamma_km=ss.w_gamma,
        neighbourhood_size=int(ss.w_Gamma),
        constraint_radius_km=ss.w_radius,
        lower_bound=bool(ss.w_lb),
        lp_time_limit_s=float(ss.w_lbtime),
        loss=ss.w_loss,
        page_loss=page_loss,
        n_tasks=int(ss.w_tasks),
        prior=ss.w_prior,
    )


def write_query(p: Params) -> None:
    """Put the view into the URL (only when it changed: no needless browser history updates).

    The link holds the sidebar's view (:func:`app.model.params.to_query`) and the pages' own state
    (:data:`app.model.page_links.PAGE_QUERY`, from the session, or kept from the link while its page is not
    shown); nothing else. While a link's box waits for its download
    (``app.widgets.area_picker.pending_link_source``) the link keeps that box, not the embedded city the map shows
    meanwhile. A page that corrects its state (say, a selected user beyond the users of the run) may call this again
    after doing so.
    """
    pending = area_picker.pending_link_source()
    if pending is not None and p.source == st.session_state.get("active_source"):
        # The link's box is not downloaded here yet: the map shows the embedded city, the link keeps the box.
        p = dataclasses.replace(p, source=pending)
    current = st.query_params.to_dict()
    wanted = to_query(p) | page_query(st.session_state, current)
    if current != wanted:
        st.query_params.from_dict(wanted)
