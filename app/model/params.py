"""The dashboard's view parameters: one frozen value, its URL (query parameter) form, its PandaConfig.

Pure Python (no streamlit): the sidebar builds a :class:`Params` from its widgets, the pages read it,
and :func:`to_query` / :func:`from_query` turn it into the link that reproduces the view.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import panda
from panda.config import PRESETS
from panda.instance import loss_label

__all__ = [
    "Params",
    "RANGES",
    "ANPO_TIME_LIMIT_S",
    "DECAY_LABELS",
    "DELTA_OPTIONS",
    "GAMMA_OPTIONS",
    "RADIUS_OPTIONS",
    "BBOX_PRESETS",
    "PRESET_FIELDS",
    "PRESET_OPTIONS",
    "from_query",
    "to_query",
    "to_config",
    "preset_values",
    "parse_source",
    "ECHO_MAX_CHARS",
]

#: Widget ranges (low, high): the sidebar and the URL reader share them.
RANGES: dict[str, tuple[float, float]] = {
    "n_records": (20, 5000),
    "n_users": (2, 200),
    "n_outputs": (5, 1000),
    "seed": (0, 2**31 - 1),
    "epsilon_per_km": (0.5, 50.0),
    "alpha": (0.05, 0.99),
    "lambda_per_km": (0.05, 10.0),
    "neighbourhood_size": (1, 50),
    "lp_time_limit_s": (1.0, 60.0),
    "n_tasks": (1, 20),
    "n_reports": (1, 20),
}
#: Time limit of PAnDA's own AnPO LP in the dashboard, seconds (it takes milliseconds on the defaults).
ANPO_TIME_LIMIT_S = 60.0

#: Decay name of PandaConfig -> the paper's method name.
DECAY_LABELS = {
    "exponential": "PAnDA-e (exponential)",
    "power": "PAnDA-p (power law)",
    "logistic": "PAnDA-l (logistic)",
}
_DECAY_SHORT = {"exponential": "e", "power": "p", "logistic": "l"}

#: Failure probabilities offered by the delta selector (log scale).
DELTA_OPTIONS = (1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.2, 0.3, 0.5)
#: Threshold distances gamma (km) offered; None = automatic (d_max / divisor of the preset).
GAMMA_OPTIONS: tuple[float | None, ...] = (None, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0)
#: LP constraint radii (km) offered; None = every anchor pair (the paper's eq. 31).
RADIUS_OPTIONS: tuple[float | None, ...] = (0.2, 0.4, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, None)

#: Bounding boxes (west, south, east, north) of the paper's three cities (section 4.1; the paper prints
#: New York's and London's with latitude and longitude swapped and New York's sign dropped).
BBOX_PRESETS: dict[str, tuple[float, float, float, float]] = {
    "Rome (the paper's box)": (12.2354, 41.6566, 12.8081, 42.0979),
    "New York (the paper's box)": (-74.25, 40.50, -73.70, 40.91),
    "London (the paper's box)": (-0.51, 51.29, 0.28, 51.69),
}


#: Loss functions the sidebar offers ("auto": the page's default, :data:`PAGE_LOSS`), with their labels.
LOSS_OPTIONS = {
    "auto": "This page's default",
    "road": "Road distance to the report",
    "straight": "Straight-line distance to the report",
    "task": "The paper's task cost",
}
#: Each page's default loss: the Lesson teaches with the distance people mean, the planner with the straight line a
#: stakeholder means by "300 m"; the research pages keep the paper's one-task cost (its setup, and the reproduction's).
PAGE_LOSS = {"lesson": "road", "guided": "road", "learn": "road", "plan": "straight"}
#: The losses' names in a few words (the "auto" option says which one it is on the page).
LOSS_SHORT = {"road": "road distance", "straight": "straight line", "task": "the paper's task cost"}
DEFAULT_PAGE_LOSS = "task"
#: Priors the sidebar offers, with their labels.
PRIOR_OPTIONS = {
    "uniform": "Uniform: every place equally likely",
    "street_count": "Streets at the place",
    "road_density": "Road density (road within 300 m)",
    "poi": "Points of interest (shops, amenities, offices)",
}
#: An uploaded places file as the prior: ``csv:`` and the first 16 hex digits of its sha256.
UPLOAD_PRIOR = re.compile(r"csv:[0-9a-f]{16}")

#: The presets the sidebar offers, in its order (every one of panda.config.PRESETS).
PRESET_OPTIONS = ("artifact", "paper", "recommended")
#: The view's fields a preset sets (they have the same names in PandaConfig). Not epsilon (the privacy
#: requirement) and not the decay (the method): those stay as the user chose them. The preset's other
#: choices (the rule beyond gamma, the Bayes adjustment, the selection form, the margin fallback) have
#: no control: :func:`to_config` takes them from the preset itself.
PRESET_FIELDS = ("delta", "alpha", "lambda_per_km", "gamma_km", "neighbourhood_size", "constraint_radius_km")


def preset_values(preset: str) -> dict[str, object]:
    """The values of :data:`PRESET_FIELDS` in ``panda.preset(preset)`` (what the sidebar moves to)."""
    config = panda.preset(preset)
    return {name: getattr(config, name) for name in PRESET_FIELDS}


@dataclass(frozen=True)
class Params:
    """Everything that defines a view (plain, hashable values; units in the names)."""

    source: str = f"city:{panda.DEFAULT_CITY}"
    n_records: int = 500
    n_users: int = 20
    n_outputs: int = 100
    seed: int = 0
    decay: str = "exponential"
    preset: str = "artifact"
    epsilon_per_km: float = 5.0
    delta: float = 1e-7
    alpha: float = 0.95
    lambda_per_km: float = 0.5
    gamma_km: float | None = None
    neighbourhood_size: int = 10
    constraint_radius_km: float | None = 0.8
    lower_bound: bool = True
    lp_time_limit_s: float = 5.0
    #: The loss function (:data:`LOSS_OPTIONS`); "auto" is the page's own default, ``page_loss``.
    loss: str = "auto"
    #: The default loss of the page shown (set by the sidebar, never in the link): see :data:`PAGE_LOSS`.
    page_loss: str = "task"
    #: Tasks of the paper's task loss (used only when the loss is "task").
    n_tasks: int = 1
    #: The prior over the places (:data:`PRIOR_OPTIONS`): how people are spread, what the attacker knows.
    prior: str = "uniform"

    def replace(self, **changes: object) -> Params:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @property
    def resolved_loss(self) -> str:
        """The loss function in force: the chosen one, or the page's default for "auto"."""
        return self.page_loss if self.loss == "auto" else self.loss

    @property
    def instance_key(self) -> tuple:
        """The arguments of the cached instance (:func:`app.state.instance`)."""
        loss = self.resolved_loss
        n_tasks = self.n_tasks if loss == "task" else 1  # the other losses read no task: one cache entry
        return (self.source, self.n_records, self.n_users, self.n_outputs, self.seed, loss, n_tasks, self.prior)

    @property
    def loss_label(self) -> str:
        """The loss function in force, in words."""
        return loss_label(self.resolved_loss, self.n_tasks)


def parse_source(source: str) -> tuple[str, object]:
    """``"city:<name>"`` -> ("city", name); ``"bbox:w,s,e,n"`` -> ("bbox", (w, s, e, n))."""
    kind, _, rest = source.partition(":")
    if kind == "city" and rest:
        return "city", rest
    if kind == "file":  # an uploaded file: the first 16 hex digits of its sha256 (panda.network_from_upload)
        if not _FILE_ID.fullmatch(rest):
            msg = f"An uploaded file's id must be 16 lowercase hex digits. Got {rest!r} instead."
            raise ValueError(msg)
        return "file", rest
    if kind == "bbox":
        parts = [float(v) for v in rest.split(",")]
        if len(parts) != 4:
            msg = f"A bounding box needs four numbers west,south,east,north. Got {rest!r} instead."
            raise ValueError(msg)
        return "bbox", tuple(parts)
    msg = f"Unknown road network source {source!r}: use city:<name>, bbox:west,south,east,north or file:<id>."
    raise ValueError(msg)


#: An uploaded file's id in a source string ``file:<id>``.
_FILE_ID = re.compile(r"[0-9a-f]{16}")


def bbox_source(bbox: tuple[float, float, float, float]) -> str:
    """The source string of a bounding box, rounded to the download grid first (``panda.network.snap_bbox``).

    The one place a box becomes a source: a link's box (:func:`from_query`, hence the prepare command's views),
    the box the page opens (app.widgets.area_picker.check_source) and the one it downloads are then the same string,
    and so are their instance and result-store keys. Raises ValueError for a box that is not valid.
    """
    snapped = panda.network.snap_bbox(panda.BoundingBox(*bbox)).as_tuple()
    return "bbox:" + ",".join(f"{v:.6f}".rstrip("0").rstrip(".") for v in snapped)


def to_config(p: Params, *, solve_relaxed: bool = False) -> panda.PandaConfig:
    """The PandaConfig of a view (the preset, then the sidebar's overrides)."""
    return panda.preset(
        p.preset,
        decay=p.decay,
        epsilon_per_km=p.epsilon_per_km,
        delta=p.delta,
        alpha=p.alpha,
        lambda_per_km=p.lambda_per_km,
        gamma_km=p.gamma_km,
        neighbourhood_size=p.neighbourhood_size,
        constraint_radius_km=p.constraint_radius_km,
        lp_time_limit_s=ANPO_TIME_LIMIT_S,
        solve_relaxed=solve_relaxed,
    )


def _fmt(v: float) -> str:
    """A number's URL text: short ("5", "1e-07", "0.3" for 0.1 + 0.2 = 0.30000000000000004), and with every digit a
    link gave it (?eps=5.1234567 is not written back as 5.12346)."""
    for digits in (6, 10, 13):
        text = f"{v:.{digits}g}"
        if math.isclose(float(text), v, rel_tol=1e-12):
            return text
    return repr(float(v))


def to_query(p: Params) -> dict[str, str]:
    """The URL form of a view: every field, short keys, plain strings."""
    kind, value = parse_source(p.source)
    out = {"city": str(value)} if kind == "city" else {kind: p.source.partition(":")[2]}
    out.update(
        {
            "K": str(p.n_records),
            "N": str(p.n_users),
            "M": str(p.n_outputs),
            "seed": str(p.seed),
            "decay": _DECAY_SHORT[p.decay],
            "preset": p.preset,
            "eps": _fmt(p.epsilon_per_km),
            "delta": _fmt(p.delta),
            "alpha": _fmt(p.alpha),
            "lambda": _fmt(p.lambda_per_km),
            "gamma": "auto" if p.gamma_km is None else _fmt(p.gamma_km),
            "Gamma": str(p.neighbourhood_size),
            "radius": "all" if p.constraint_radius_km is None else _fmt(p.constraint_radius_km),
            "lb": "1" if p.lower_bound else "0",
            "lbtime": _fmt(p.lp_time_limit_s),
        }
    )
    if p.loss != "auto":
        out["loss"] = p.loss
    if p.n_tasks != 1:
        out["tasks"] = str(p.n_tasks)
    if p.prior != "uniform":
        out["prior"] = p.prior
    return out


#: The most characters of a link's value echoed back in a message.
ECHO_MAX_CHARS = 40


def _shown(value: object) -> str:
    """A value from a link as a message may echo it: at most ECHO_MAX_CHARS characters, one line."""
    text = " ".join(str(value).split())
    # Control and format characters (NUL, a right-to-left override that would turn the sentence around) as "�".
    text = "".join(c if c.isprintable() else "\ufffd" for c in text)
    return text if len(text) <= ECHO_MAX_CHARS else text[: ECHO_MAX_CHARS - 1] + "…"


def _nearest(options: tuple, value: float) -> float:
    finite = [o for o in options if o is not None]
    return min(finite, key=lambda o: abs(math.log(o) - math.log(value)))


def _span(options: tuple) -> str:
    finite = [o for o in options if o is not None]
    return f"{min(finite):g} to {max(finite):g}"


def _offered(options: tuple, value: float) -> bool:
    """True when ``value`` lies within the offered options' span (it is then moved to the nearest one)."""
    finite = [o for o in options if o is not None]
    return math.isfinite(value) and min(finite) <= value <= max(finite)


def from_query(query: Mapping[str, str], base: Params | None = None) -> tuple[Params, list[str]]:
    """Read a view from query parameters; unknown or bad values are ignored and reported.

    Returns
    -------
    params, problems
        The view (``base`` with every valid parameter applied) and one message per ignored value.
    """
    p = base or Params()
    link = _LinkReader(query)
    # In this order: a preset's values land after the sizes and the decay, and the link's own parameters
    # below the preset override them.
    _read_source(link)
    link.number("K", "n_records", int, *RANGES["n_records"])
    link.number("N", "n_users", int, *RANGES["n_users"])
    link.number("M", "n_outputs", int, *RANGES["n_outputs"])
    link.number("seed", "seed", int, *RANGES["seed"])
    _read_decay(link)
    _read_preset(link)
    link.number("eps", "epsilon_per_km", float, *RANGES["epsilon_per_km"])
    _read_delta(link)
    link.number("alpha", "alpha", float, *RANGES["alpha"])
    link.number("lambda", "lambda_per_km", float, *RANGES["lambda_per_km"])
    _read_distance(link, "gamma", "gamma_km", "auto", GAMMA_OPTIONS)
    link.number("Gamma", "neighbourhood_size", int, *RANGES["neighbourhood_size"])
    _read_distance(link, "radius", "constraint_radius_km", "all", RADIUS_OPTIONS)
    _read_lower_bound(link)
    link.number("lbtime", "lp_time_limit_s", float, *RANGES["lp_time_limit_s"])
    _read_loss(link)
    link.number("tasks", "n_tasks", int, *RANGES["n_tasks"])
    _read_prior(link)
    return p.replace(**link.changes), link.problems


class _LinkReader:
    """A link's query parameters, read one at a time: valid values go to ``changes``, one message per ignored one
    to ``problems``."""

    def __init__(self, query: Mapping[str, str]):
        self.query = query
        self.changes: dict[str, object] = {}
        self.problems: list[str] = []

    def get(self, key: str) -> str | None:
        """The parameter's text, stripped, or None when the link does not have it."""
        value = self.query.get(key)
        if isinstance(value, list):  # repeated parameter: the last one wins
            value = value[-1] if value else None
        return None if value is None else str(value).strip()

    def number(self, key: str, field: str, cast: type[int] | type[float], low: float, high: float) -> None:
        """Set ``field`` from the number of ``key`` when it is one (whole for ``int``) in ``[low, high]``."""
        raw = self.get(key)
        if raw is None:
            return
        try:
            x = float(raw)
        except ValueError:
            x = math.nan
        if math.isnan(x):  # ?eps=nan too
            self.problems.append(f"'{key}={_shown(raw)}' is not a number: ignored.")
            return
        if cast is int and math.isfinite(x) and not x.is_integer():  # ?K=200.5 is not K = 200
            self.problems.append(f"'{key}={_shown(raw)}' is not a whole number: ignored.")
            return
        try:
            value = cast(x)
        except OverflowError:  # int(float("inf")): ?K=inf, ?seed=1e999
            self.problems.append(f"'{key}={_shown(raw)}' is outside [{low:g}, {high:g}]: ignored.")
            return
        if not (low <= value <= high) or (isinstance(value, float) and not math.isfinite(value)):
            self.problems.append(f"'{key}={_shown(raw)}' is outside [{low:g}, {high:g}]: ignored.")
            return
        self.changes[field] = value


def _read_source(link: _LinkReader) -> None:
    """The road network: an uploaded file, else a box, else a city. A link naming two says which one is not used."""
    city, bbox, upload = link.get("city"), link.get("bbox"), link.get("file")
    sources = [(key, value) for key, value in (("file", upload), ("bbox", bbox), ("city", city)) if value is not None]
    for key, value in sources[1:]:
        link.problems.append(
            f"'{key}={_shown(value)}' is not used because the link also has {sources[0][0]}=: ignored."
        )
    if upload is not None:
        if _FILE_ID.fullmatch(upload):
            link.changes["source"] = f"file:{upload}"
        else:
            link.problems.append(f"'file={_shown(upload)}' is not an uploaded file's id (16 hex digits): ignored.")
    elif bbox is not None:
        try:
            values = tuple(float(v) for v in bbox.split(","))
            if len(values) != 4:
                raise ValueError
            panda.BoundingBox(*values)
            link.changes["source"] = bbox_source(values)
        except ValueError:
            link.problems.append(f"'bbox={_shown(bbox)}' is not a valid west,south,east,north box: ignored.")
    elif city is not None:
        if city.lower() in panda.list_cities():
            link.changes["source"] = f"city:{city.lower()}"
        else:
            cities = ", ".join(panda.list_cities())
            link.problems.append(f"'city={_shown(city)}' is not an embedded city ({cities}): ignored.")


def _read_decay(link: _LinkReader) -> None:
    decay = link.get("decay")
    if decay is None:
        return
    full = {v: k for k, v in _DECAY_SHORT.items()} | {k: k for k in _DECAY_SHORT}
    if decay in full:
        link.changes["decay"] = full[decay]
    else:
        link.problems.append(f"'decay={_shown(decay)}' is not one of e, p, l: ignored.")


def _read_preset(link: _LinkReader) -> None:
    preset = link.get("preset")
    if preset is None:
        return
    if preset in PRESETS:
        # The preset's values first: the link's own parameters read after it override them.
        link.changes["preset"] = preset
        link.changes.update(preset_values(preset))
    else:
        link.problems.append(f"'preset={_shown(preset)}' is not one of {', '.join(PRESETS)}: ignored.")


def _read_delta(link: _LinkReader) -> None:
    """delta moves to the nearest offered probability (log scale), when it lies within their span."""
    raw_delta = link.get("delta")
    if raw_delta is None:
        return
    try:
        d = float(raw_delta)
        if not _offered(DELTA_OPTIONS, d):  # ?delta=5e-324 is not delta = 1e-9
            raise ValueError
        link.changes["delta"] = _nearest(DELTA_OPTIONS, d)
    except ValueError:
        low, high = min(DELTA_OPTIONS), max(DELTA_OPTIONS)
        link.problems.append(f"'delta={_shown(raw_delta)}' is not a probability from {low:g} to {high:g}: ignored.")


def _read_distance(link: _LinkReader, key: str, field: str, word: str, options: tuple[float | None, ...]) -> None:
    """A distance in km moved to the nearest of ``options`` (within their span), or ``word`` for None (gamma's
    "auto", the radius's "all")."""
    raw = link.get(key)
    if raw is None:
        return
    if raw == word:
        link.changes[field] = None
        return
    try:
        value = float(raw)
        if not _offered(options, value):  # ?gamma=1e9 is not gamma = 5 km
            raise ValueError
        link.changes[field] = _nearest(options, value)
    except ValueError:
        span = _span(options)
        link.problems.append(f"'{key}={_shown(raw)}' is not '{word}' or a distance from {span} km: ignored.")


def _read_lower_bound(link: _LinkReader) -> None:
    lb = link.get("lb")
    if lb is None:
        return
    if lb in ("0", "1"):
        link.changes["lower_bound"] = lb == "1"
    else:
        link.problems.append(f"'lb={_shown(lb)}' must be 0 or 1: ignored.")


def _read_loss(link: _LinkReader) -> None:
    loss = link.get("loss")
    if loss is None:
        return
    if loss in LOSS_OPTIONS:
        link.changes["loss"] = loss
    else:
        link.problems.append(f"'loss={_shown(loss)}' is not one of {', '.join(LOSS_OPTIONS)}: ignored.")


def _read_prior(link: _LinkReader) -> None:
    prior = link.get("prior")
    if prior is None:
        return
    if prior in PRIOR_OPTIONS or UPLOAD_PRIOR.fullmatch(prior):
        link.changes["prior"] = prior
    else:
        known = ", ".join(PRIOR_OPTIONS)
        link.problems.append(f"'prior={_shown(prior)}' is not one of {known} or an uploaded file: ignored.")
