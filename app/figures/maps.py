"""pydeck map builders (pure: no streamlit calls; they return a ``pdk.Deck``).

Every deck uses ``map_provider=None``: no basemap, no request to a tile server. The road network is
drawn from the network's own edges. Every pickable object carries a ``tooltip`` string with units.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pydeck as pdk
import pydeck.bindings.deck as pydeck_deck
from pydeck.bindings.json_tools import default_serialize

import panda
from app.figures.palette import heat_rgb
from app.model.panda_numbers import UserPairs, fmt_m, surrogate_rows

__all__ = [
    "LAYERS",
    "DEFAULT_LAYERS",
    "TOOLTIP_STYLE",
    "road_segments",
    "roads_layer",
    "heat_color",
    "fit_view",
    "ToLonLat",
    "record_positions",
    "line_layer",
    "disc_layer",
    "map_deck",
    "build_deck",
    "COLORS",
    "CompactDeck",
    "SharedRows",
]


# pydeck asks whether Jupyter's widgets are installed on every Deck and on every attribute it sets, each time by a
# failed import (a search of sys.path): most of a deck's construction. A server has no notebook.
pydeck_deck.has_jupyter_extra = lambda: False


class SharedRows(list):
    """A layer's data that many decks draw unchanged (the roads, the places, their tap cells), kept with its JSON.

    A page run builds a new deck, but the large layers are the same objects from the server's caches: their JSON
    is made once (:meth:`json`) and spliced into every deck's (:class:`CompactDeck`). No one may change the rows.
    """

    _json: str | None = None

    def json(self) -> str:
        """The rows as JSON (as :class:`CompactDeck` writes them), made on first use."""
        if self._json is None:
            self._json = json.dumps(list(self), sort_keys=True, default=default_serialize, separators=(",", ":"))
        return self._json


class CompactDeck(pdk.Deck):
    """A deck whose JSON has no indentation (pydeck indents it, which multiplies the bytes sent on every rerun),
    with the JSON of its :class:`SharedRows` layers made once, not on every run."""

    def to_json(self) -> str:  # noqa: D102 (pdk.Deck.to_json)
        shared: dict[str, SharedRows] = {}
        for layer in self.layers:
            rows = getattr(layer, "_data", None)
            if isinstance(rows, SharedRows):
                token = f"@@shared-rows-{len(shared)}@@"
                shared[token] = rows
                layer._data = token  # noqa: SLF001 (pydeck keeps a layer's rows there; restored below)
        try:
            # pydeck's own serializer in one pass, without its indent (an indent forces json's pure-Python
            # encoder, and a dumps(loads(...)) round trip would serialise the deck twice more).
            text = json.dumps(self, sort_keys=True, default=default_serialize, separators=(",", ":"))
        finally:
            for layer in self.layers:
                token = getattr(layer, "_data", None)
                if isinstance(token, str) and token in shared:
                    layer._data = shared[token]  # noqa: SLF001
        for token, rows in shared.items():
            text = text.replace(json.dumps(token), rows.json(), 1)
        return text


#: Layer id -> label of the layer toggle.
LAYERS = {
    "roads": "Roads",
    "records": "Records",
    "users": "Users",
    "anchors": "Anchors (selected user)",
    "surrogates": "Surrogates",
    "perturbation": "Perturbation heatmap",
    "violations": "Violating pairs",
}
DEFAULT_LAYERS = ("roads", "records", "users", "anchors", "surrogates", "perturbation")

COLORS = {
    "roads": [128, 128, 140, 150],
    "records": [70, 130, 180, 170],
    "user": [255, 140, 0, 235],
    "user_empty": [150, 150, 150, 235],
    "selected": [220, 20, 60, 255],
    "anchor": [138, 43, 226, 220],
    "surrogate": [0, 160, 120, 230],
}
#: A record position -> its ``[lon, lat]`` in a deck's data (:func:`record_positions`).
ToLonLat = Callable[[int], list[float]]
#: Most road segments drawn (larger networks are thinned evenly; the caption says so).
MAX_SEGMENTS = 60_000
#: The hover box. Each object's ``tooltip`` is plain text (Streamlit would show HTML in it literally):
#: its line breaks are newlines, kept by the "text" tooltip and ``white-space: pre-line``. deck.gl puts
#: the box at the pointer, where one near the right or bottom edge of the map is cut off; this style
#: (applied after deck.gl's position) pins it to the map's top-left corner instead, always in view.
TOOLTIP_STYLE = {
    "backgroundColor": "rgba(31, 38, 48, 0.93)",
    "color": "white",
    "fontSize": "12px",
    "lineHeight": "1.45",
    "whiteSpace": "pre-line",
    "transform": "none",
    "top": "8px",
    "left": "8px",
    "maxWidth": "min(340px, calc(100% - 16px))",
    "padding": "6px 9px",
    "borderRadius": "4px",
}


def road_segments(net: panda.RoadNetwork, *, max_segments: int = MAX_SEGMENTS) -> tuple[list[dict], int]:
    """Undirected road segments as ``{"s": [lon, lat], "t": [lon, lat]}``; and how many exist in all."""
    u, v = np.asarray(net.edge_u), np.asarray(net.edge_v)
    a, b = np.minimum(u, v), np.maximum(u, v)
    keep = a != b
    pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0)
    total = int(pairs.shape[0])
    if total > max_segments:
        pairs = pairs[np.linspace(0, total - 1, max_segments).astype(np.int64)]
    lon = np.round(np.asarray(net.lon, dtype=float), 6)
    lat = np.round(np.asarray(net.lat, dtype=float), 6)
    segs = SharedRows({"s": [lon[i], lat[i]], "t": [lon[j], lat[j]]} for i, j in pairs.tolist())
    return segs, total


def roads_layer(segments: list[dict]) -> pdk.Layer:
    """The road network drawn from :func:`road_segments` (thin grey lines, not pickable)."""
    return line_layer("roads", segments, get_color=COLORS["roads"], get_width=1, width_min_pixels=1, pickable=False)


def fit_view(lon: np.ndarray, lat: np.ndarray, *, width_px: int = 640, height_px: int = 540) -> pdk.ViewState:
    """A top-down view that shows every point (web-mercator zoom from the bounding box)."""
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    w, e, s, n = lon.min(), lon.max(), lat.min(), lat.max()
    lat0 = (s + n) / 2
    d_lon = max(e - w, 1e-4)
    d_lat = max((n - s) / max(math.cos(math.radians(lat0)), 0.05), 1e-4)
    # deck.gl's web-mercator world is 512 px wide at zoom 0.
    zoom = min(math.log2(360.0 * width_px / (512.0 * d_lon)), math.log2(360.0 * height_px / (512.0 * d_lat)))
    return pdk.ViewState(longitude=float((w + e) / 2), latitude=float(lat0), zoom=float(max(zoom - 0.15, 1.0)))


def heat_color(t: float, *, alpha_low: int = 140) -> list[int]:
    """Pale yellow (0) to dark navy (1), RGBA: reversed cividis (app/figures/palette.py, readable with colour-vision
    deficiencies); the opacity rises from ``alpha_low`` to 250."""
    t = float(min(max(t, 0.0), 1.0))
    return [*(int(c) for c in heat_rgb(t)), int(alpha_low + (250 - alpha_low) * t)]


def record_positions(instance: panda.Instance) -> ToLonLat:
    """A function from a record position to its ``[lon, lat]``, rounded to 1e-6 degree (about 0.1 m)."""
    lon = np.asarray(instance.lon, dtype=float)
    lat = np.asarray(instance.lat, dtype=float)

    def pos(x: int) -> list[float]:
        return [round(float(lon[x]), 6), round(float(lat[x]), 6)]

    return pos


def line_layer(layer_id: str, data: list[dict], **style: Any) -> pdk.Layer:
    """Segments from each object's ``s`` to its ``t`` (``[lon, lat]``), drawn with ``style`` (colour, width, ...)."""
    return pdk.Layer("LineLayer", data=data, id=layer_id, get_source_position="s", get_target_position="t", **style)


def disc_layer(layer_id: str, data: list[dict], **style: Any) -> pdk.Layer:
    """Pickable discs at each object's ``p``, filled with its colour ``c``, its radius ``r`` in pixels (``style``:
    the outline)."""
    return pdk.Layer(
        "ScatterplotLayer",
        data=data,
        id=layer_id,
        get_position="p",
        get_fill_color="c",
        get_radius="r",
        radius_units="'pixels'",
        pickable=True,
        **style,
    )


def map_deck(
    layers: list[pdk.Layer], instance: panda.Instance, *, width_px: int = 640, height_px: int = 540
) -> CompactDeck:
    """The deck of ``layers``, its view fitting every record into ``width_px`` x ``height_px``, no basemap."""
    return CompactDeck(
        layers=layers,
        initial_view_state=fit_view(instance.lon, instance.lat, width_px=width_px, height_px=height_px),
        map_provider=None,  # no basemap; keep pydeck's default map_style: with map_style=None
        # Streamlit's front end would fill in a Carto basemap (an outside request)
        tooltip={"text": "{tooltip}", "style": TOOLTIP_STYLE},  # pinned top-left: never cut at the edge
    )


def build_deck(
    net: panda.RoadNetwork,
    instance: panda.Instance,
    result: panda.PandaResult | None,
    *,
    layers: tuple[str, ...] | list[str] = DEFAULT_LAYERS,
    selected_user: int = 0,
    pairs: UserPairs | None = None,
    segments: list[dict] | None = None,
) -> pdk.Deck:
    """The Explore map: the requested layers of a view, bottom to top in :data:`LAYERS` order.

    Parameters
    ----------
    net, instance, result
        The view's road network, instance and PAnDA result (``None``: network and records only).
    layers
        Layer ids of :data:`LAYERS` to draw; the deck's layers keep these ids.
    selected_user
        The user whose anchors and output distribution are drawn.
    pairs
        The user-pair check (:func:`app.model.panda_numbers.user_pairs`) for the violations layer.
    segments
        Pre-computed :func:`road_segments` (drawn from ``net`` when omitted).
    """
    wanted = set(layers)
    pos = record_positions(instance)
    out: list[pdk.Layer] = []
    if "roads" in wanted:
        out.append(roads_layer(segments if segments is not None else road_segments(net)[0]))
    if "records" in wanted:
        out.append(_records_layer(instance, pos))
    if result is None:
        return map_deck(out, instance)
    run = _RunView.of(instance, result, selected_user)
    if "surrogates" in wanted:
        out.append(_surrogates_layer(run, pos))
    if "violations" in wanted and pairs is not None and pairs.size:
        out.append(_violations_layer(pairs, run.users, pos))
    if "perturbation" in wanted and result.z is not None and run.selected_row >= 0:
        out.append(_perturbation_layer(instance, run, pos))
    if "anchors" in wanted and run.n_users:
        out.append(_anchors_layer(instance, run, pos))
    if "users" in wanted and run.n_users:
        out.append(_users_layer(instance, run, pos))
    return map_deck(out, instance)


@dataclass(frozen=True)
class _RunView:
    """What the user layers of :func:`build_deck` share: the run, its users, the selected one, the surrogates."""

    result: panda.PandaResult
    users: np.ndarray  # (N,) each user's true record
    selected: int  # the selected user, clamped to 0..N-1
    has_surrogate: np.ndarray  # (N,) bool
    surrogate_m: np.ndarray  # (N,) distance from the true record to the surrogate, metres (nan: none)
    selected_row: int  # the selected user's row of the output distribution result.z (-1: none)

    @classmethod
    def of(cls, instance: panda.Instance, result: panda.PandaResult, selected_user: int) -> _RunView:
        users = result.user_records
        n_users = users.size
        has = result.surrogates >= 0
        d_sur_m = np.full(n_users, np.nan)
        if has.any():
            d_sur_m[has] = 1000 * instance.distances_km_pairs(users[has], result.surrogates[has])
        selected = int(min(max(selected_user, 0), max(n_users - 1, 0)))
        row = int(surrogate_rows(result)[selected]) if n_users else -1
        return cls(result, users, selected, has, d_sur_m, row)

    @property
    def n_users(self) -> int:
        return int(self.users.size)


def _records_layer(instance: panda.Instance, pos: ToLonLat) -> pdk.Layer:
    is_output = np.zeros(instance.n_records, dtype=bool)
    is_output[instance.outputs] = True
    data = [
        {
            "p": pos(x),
            "tooltip": f"Secret record #{x}{' (also an output)' if is_output[x] else ''}\n"
            f"prior {instance.prior[x]:.2%}",
        }
        for x in range(instance.n_records)
    ]
    return pdk.Layer(
        "ScatterplotLayer",
        data=data,
        id="records",
        get_position="p",
        get_fill_color=COLORS["records"],
        get_radius=8,
        radius_min_pixels=2,
        radius_max_pixels=4,
        pickable=True,
    )


def _surrogates_layer(run: _RunView, pos: ToLonLat) -> pdk.Layer:
    surrogates = run.result.surrogates
    data = [
        {
            "s": pos(run.users[n]),
            "t": pos(surrogates[n]),
            "tooltip": f"User {n} → surrogate record #{surrogates[n]}\n"
            f"{fmt_m(run.surrogate_m[n])} from the true record",
        }
        for n in np.flatnonzero(run.has_surrogate)
    ]
    return line_layer("surrogates", data, get_color=COLORS["surrogate"], get_width=3, width_min_pixels=2, pickable=True)


def _violations_layer(pairs: UserPairs, users: np.ndarray, pos: ToLonLat) -> pdk.Layer:
    """The user pairs that break eps-mDP: darker and wider the larger the excess (relative to the largest)."""
    bad = np.flatnonzero(pairs.violated)
    excess = pairs.excess[bad]
    finite = np.isfinite(excess)
    top = float(np.max(excess[finite])) if finite.any() else 1.0
    data = []
    for k, e in zip(bad.tolist(), excess.tolist(), strict=True):
        t = 1.0 if not np.isfinite(e) or top <= 0 else e / top
        n, m = int(pairs.n[k]), int(pairs.m[k])
        data.append(
            {
                "s": pos(users[n]),
                "t": pos(users[m]),
                "c": heat_color(t),
                "w": 1.5 + 4.5 * t,
                "tooltip": f"Users {n} and {m}: {fmt_m(1000 * pairs.d_km[k])} apart\n"
                f"allowed ln-ratio (ε − ε̄)·d = {pairs.allowed[k]:.2f}\n"
                f"actual max ln-ratio = {pairs.actual[k]:.2f}\nexcess = {e:.2f} nats",
            }
        )
    return line_layer("violations", data, get_color="c", get_width="w", width_min_pixels=1, pickable=True)


def _perturbation_layer(instance: panda.Instance, run: _RunView, pos: ToLonLat) -> pdk.Layer:
    """The selected user's output distribution: a disc per output, bigger and darker = likelier."""
    sel = run.selected
    probs = run.result.z[run.selected_row]
    top = float(probs.max()) if probs.size else 1.0
    cost = instance.cost_m[run.users[sel]]
    data = []
    for j in np.argsort(probs).tolist():  # most likely drawn last (on top)
        p = float(probs[j])
        t = p / top if top > 0 else 0.0
        y = int(instance.outputs[j])
        data.append(
            {
                "p": pos(y),
                "r": 3.0 + 11.0 * math.sqrt(t),
                "c": heat_color(t),
                "tooltip": f"Output #{j} (record #{y})\nPr[user {sel} reports it] = {p:.2%}\n"
                f"utility cost {fmt_m(cost[j])}",
            }
        )
    return disc_layer("perturbation", data, stroked=False)


def _anchors_layer(instance: panda.Instance, run: _RunView, pos: ToLonLat) -> pdk.Layer:
    """The selected user's anchor records as rings (its surrogate's larger)."""
    sel = run.selected
    anchors = run.result.anchor_sets[sel]
    surrogate = run.result.surrogates[sel]
    d_m = 1000 * instance.distances_km(np.array([run.users[sel]]), anchors)[0] if anchors.size else np.zeros(0)
    data = [
        {
            "p": pos(a),
            "r": 9 if a == surrogate else 6,
            "tooltip": f"Anchor record #{a} of user {sel}"
            + (" (its surrogate)" if a == surrogate else "")
            + f"\n{fmt_m(d)} from the true record",
        }
        for a, d in zip(anchors.tolist(), d_m.tolist(), strict=True)
    ]
    return pdk.Layer(
        "ScatterplotLayer",
        data=data,
        id="anchors",
        get_position="p",
        get_radius="r",
        radius_units="'pixels'",
        filled=False,
        stroked=True,
        get_line_color=COLORS["anchor"],
        line_width_min_pixels=2,
        pickable=True,
    )


def _users_layer(instance: panda.Instance, run: _RunView, pos: ToLonLat) -> pdk.Layer:
    """Every user at its true record: the selected one larger, users without anchors grey."""
    data = [_user_object(instance, run, n, pos) for n in range(run.n_users)]
    return disc_layer("users", data, stroked=True, get_line_color=[255, 255, 255, 255], line_width_min_pixels=1)


def _user_object(instance: panda.Instance, run: _RunView, n: int, pos: ToLonLat) -> dict:
    result, users, sel, has = run.result, run.users, run.selected, run.has_surrogate
    n_anchor = int(result.anchor_sets[n].size)
    out_txt = ""
    if result.outputs[n] >= 0:
        y = int(instance.outputs[result.outputs[n]])
        away_m = 1000 * float(instance.distances_km_pairs(users[n], y))
        out_txt = f"\nreported output #{int(result.outputs[n])}, {fmt_m(away_m)} away"
    color = COLORS["selected"] if n == sel else (COLORS["user"] if has[n] else COLORS["user_empty"])
    return {
        "p": pos(users[n]),
        "c": color,
        "r": 9 if n == sel else 6,
        "tooltip": f"User {n}{' (selected)' if n == sel else ''}: true record #{int(users[n])}\n"
        f"{n_anchor} anchor{'s' if n_anchor != 1 else ''}"
        + (f", surrogate {fmt_m(run.surrogate_m[n])} away" if has[n] else " (cannot report: no anchors)")
        + out_txt,
    }
