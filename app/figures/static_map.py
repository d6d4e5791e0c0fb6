"""The Lesson map as a static plotly figure, for a PNG download (pure: no streamlit calls).

It draws the same layers as :func:`app.figures.lesson_maps.build_lesson_deck` from the same inputs: roads, the
planar Laplace glow, report discs (bigger, darker = likelier) or the attacker's belief, every place, the
expected-error ring, sampled reports, the A/B markers, the report and the attacker's guess. Longitude
runs along x and latitude along y with one kilometre as long on both axes at the map's centre (an
equirectangular view, like the web map at city scale); no tiles, so no outside request. The map data's
attribution is written on the figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

import panda
from app.figures.lesson_maps import A_COLOR, B_COLOR, BELIEF_FLOOR, GUESS_COLOR, REPORT_FLOOR, heat_order
from app.figures.maps import COLORS, heat_color

__all__ = ["static_lesson_map", "static_exposure_map", "ring_lon_lat", "TRACE_NAMES"]

#: Trace name of each layer (the legend's words; tests find the layers by them).
TRACE_NAMES = {
    "roads": "Roads",
    "reports": "Where A's reports land",
    "belief": "Attacker's belief",
    "places": "Places",
    "ring": "A's expected error",
    "samples": "Sampled reports",
    "a": "Place A",
    "b": "Place B",
    "report": "The report",
    "guess": "Attacker's best guess",
    "guess_line": "Guess to truth",
}
#: Margin around the places, as a share of their extent.
PAD = 0.04


def _rgba(color: Sequence[int]) -> str:
    r, g, b = (int(c) for c in color[:3])
    a = (color[3] if len(color) > 3 else 255) / 255.0
    return f"rgba({r},{g},{b},{a:.3f})"


def ring_lon_lat(lon0: float, lat0: float, radius_m: float, *, n: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """A circle of ``radius_m`` around ``(lon0, lat0)`` (local tangent plane), closed, in degrees."""
    t = np.linspace(0.0, 2.0 * math.pi, n + 1)
    d_lat = math.degrees(radius_m / 1000.0 / panda.network.EARTH_RADIUS_KM)
    d_lon = d_lat / max(math.cos(math.radians(lat0)), 1e-6)
    return lon0 + d_lon * np.cos(t), lat0 + d_lat * np.sin(t)


def _roads(segments: list[dict]) -> go.Scatter:
    xs: list[float | None] = []
    ys: list[float | None] = []
    for seg in segments:
        (x0, y0), (x1, y1) = seg["s"], seg["t"]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        line={"color": _rgba(COLORS["roads"]), "width": 0.8},
        name=TRACE_NAMES["roads"],
        hoverinfo="skip",
        showlegend=False,
    )


def _discs(
    lon: np.ndarray, lat: np.ndarray, where: np.ndarray, weight: np.ndarray, key: str, *, size0: float, size1: float
) -> go.Scatter:
    """Discs at ``where`` (record positions) sized and coloured by ``weight / max`` (drawn smallest first)."""
    top = float(weight.max()) if weight.size and weight.max() > 0 else 1.0
    t = weight / top
    # The deck's radius (px) is half of plotly's marker size (a diameter).
    return go.Scatter(
        x=lon[where],
        y=lat[where],
        mode="markers",
        marker={
            "size": 2.0 * (size0 + size1 * np.sqrt(t)),
            "color": [_rgba(heat_color(v, alpha_low=120)) for v in t.tolist()],
            "line": {"width": 0},
        },
        name=TRACE_NAMES[key],
        showlegend=True,
    )


def _marker(x: float, y: float, key: str, color: Sequence[int], *, size: float = 18, line: str = "white") -> go.Scatter:
    return go.Scatter(
        x=[x],
        y=[y],
        mode="markers",
        marker={"size": size, "color": _rgba(color), "line": {"color": line, "width": 2}},
        name=TRACE_NAMES[key],
    )


def static_lesson_map(
    instance: panda.Instance,
    segments: list[dict],
    *,
    place_a: int,
    place_b: int | None = None,
    row_a: np.ndarray | None = None,
    ring_m: float | None = None,
    samples: list[int] | None = None,
    density: tuple[str, list[float]] | None = None,
    belief: np.ndarray | None = None,
    report: int | None = None,
    guess: int | None = None,
    height_px: int = 520,
    width_px: int = 480,
    attribution: str | None = None,
) -> go.Figure:
    """The Lesson map as a plotly figure (the arguments of :func:`app.figures.lesson_maps.build_lesson_deck`).

    Parameters
    ----------
    instance, segments, place_a, place_b, row_a, ring_m, samples, density, belief, report, guess
        As in :func:`app.figures.lesson_maps.build_lesson_deck`: the view's instance, its road segments, the two
        places (record positions), A's ``(M,)`` report distribution, the expected-error ring's radius in
        metres, sampled output positions, the planar Laplace glow (image URI and bounds), and the
        attacker mode's ``(K,)`` belief, report (output position) and guess (record position).
    height_px, width_px
        The figure's size in pixels (the plot area keeps one kilometre as long on both axes).
    attribution
        The map data's attribution written on the figure; ``None``: the instance's network's.

    Returns
    -------
    go.Figure
        One trace per layer, named as in :data:`TRACE_NAMES`; x is longitude, y latitude (degrees).
    """
    _check_places(instance.n_records, place_a=place_a, place_b=place_b, guess=guess)
    lon = np.asarray(instance.lon, dtype=float)
    lat = np.asarray(instance.lat, dtype=float)
    outputs = np.asarray(instance.outputs)
    fig = go.Figure()
    fig.add_trace(_roads(segments))
    if belief is not None:
        b = np.asarray(belief, dtype=float)
        shown, _ = heat_order(b, BELIEF_FLOOR)
        fig.add_trace(_discs(lon, lat, shown, b[shown], "belief", size0=3.0, size1=13.0))
    elif row_a is not None:
        probs = np.asarray(row_a, dtype=float)
        shown, _ = heat_order(probs, REPORT_FLOOR)
        fig.add_trace(_discs(lon, lat, outputs[shown], probs[shown], "reports", size0=4.0, size1=14.0))
    fig.add_trace(_places(lon, lat))
    if ring_m is not None and math.isfinite(ring_m) and ring_m > 0:
        fig.add_trace(_ring(float(lon[place_a]), float(lat[place_a]), float(ring_m)))
    if samples:
        fig.add_trace(_samples(lon, lat, outputs[np.asarray(samples, dtype=int)]))
    if guess is not None:
        fig.add_trace(_guess_line(lon, lat, guess, place_a))
    fig.add_trace(_marker(lon[place_a], lat[place_a], "a", A_COLOR))
    if place_b is not None:
        fig.add_trace(_marker(lon[place_b], lat[place_b], "b", B_COLOR))
    if report is not None:
        y = int(outputs[report])
        fig.add_trace(_marker(lon[y], lat[y], "report", [255, 255, 255, 255], line=_rgba([20, 20, 20])))
    if guess is not None:
        fig.add_trace(_marker(lon[guess], lat[guess], "guess", GUESS_COLOR))
    if density is not None:
        _add_density(fig, *density)
    _fit_view(fig, lon, lat)
    _layout(fig, width_px, height_px, attribution or instance.network.attribution)
    return fig


def _check_places(n_records: int, **places: int | None) -> None:
    for name, value in places.items():
        if value is not None and not 0 <= int(value) < n_records:
            msg = (
                f"The '{name}' parameter of static_lesson_map must be a place in 0..{n_records - 1}. "
                f"Got {value!r} instead."
            )
            raise ValueError(msg)


def _places(lon: np.ndarray, lat: np.ndarray) -> go.Scatter:
    return go.Scatter(
        x=lon,
        y=lat,
        mode="markers",
        marker={"size": 5, "color": "rgba(70,130,180,0.35)", "line": {"width": 0}},
        name=TRACE_NAMES["places"],
        showlegend=False,
    )


def _ring(lon0: float, lat0: float, ring_m: float) -> go.Scatter:
    rx, ry = ring_lon_lat(lon0, lat0, ring_m)
    return go.Scatter(
        x=rx,
        y=ry,
        mode="lines",
        line={"color": _rgba([*A_COLOR[:3], 220]), "width": 2},
        name=f"{TRACE_NAMES['ring']} ({ring_m:,.0f} m)",
    )


def _samples(lon: np.ndarray, lat: np.ndarray, where: np.ndarray) -> go.Scatter:
    return go.Scatter(
        x=lon[where],
        y=lat[where],
        mode="markers",
        marker={"size": 14, "color": "white", "line": {"color": _rgba([20, 20, 20]), "width": 2}},
        name=TRACE_NAMES["samples"],
    )


def _guess_line(lon: np.ndarray, lat: np.ndarray, guess: int, truth: int) -> go.Scatter:
    return go.Scatter(
        x=[lon[guess], lon[truth]],
        y=[lat[guess], lat[truth]],
        mode="lines",
        line={"color": _rgba(GUESS_COLOR), "width": 2},
        name=TRACE_NAMES["guess_line"],
        showlegend=False,
    )


def _add_density(fig: go.Figure, uri: str, bounds: Sequence[float]) -> None:
    """Planar Laplace's glow, an image under the traces stretched over its bounds (west, south, east, north)."""
    west, south, east, north = bounds
    fig.add_layout_image(
        source=uri,
        xref="x",
        yref="y",
        x=west,
        y=north,
        sizex=east - west,
        sizey=north - south,
        sizing="stretch",
        opacity=0.85,
        layer="below",
    )


def _fit_view(fig: go.Figure, lon: np.ndarray, lat: np.ndarray) -> None:
    """The view: every place with a margin, one kilometre as long along x as along y at the centre."""
    west, east, south, north = lon.min(), lon.max(), lat.min(), lat.max()
    pad_lon, pad_lat = PAD * max(east - west, 1e-4), PAD * max(north - south, 1e-4)
    lat0 = float((south + north) / 2)
    fig.update_xaxes(
        range=[west - pad_lon, east + pad_lon], visible=False, showgrid=False, zeroline=False, constrain="domain"
    )
    fig.update_yaxes(
        range=[south - pad_lat, north + pad_lat],
        visible=False,
        showgrid=False,
        zeroline=False,
        scaleanchor="x",
        scaleratio=1.0 / max(math.cos(math.radians(lat0)), 0.05),
        constrain="domain",
    )


def _layout(fig: go.Figure, width_px: int, height_px: int, attribution: str) -> None:
    """The figure's size, white background, the legend under the map and the map data's attribution."""
    fig.update_layout(
        width=int(width_px),
        height=int(height_px),
        margin={"l": 8, "r": 8, "t": 8, "b": 56},
        plot_bgcolor="white",
        paper_bgcolor="white",
        legend={"orientation": "h", "yanchor": "top", "y": -0.01, "x": 0, "font": {"size": 10}},
        annotations=[
            {
                "text": f"Map data {attribution}",
                "xref": "paper",
                "yref": "paper",
                "x": 1,
                "y": 0,
                "xanchor": "right",
                "yanchor": "bottom",
                "showarrow": False,
                "font": {"size": 9, "color": "#444"},
                "bgcolor": "rgba(255,255,255,0.8)",
            }
        ],
    )


def static_exposure_map(
    instance: panda.Instance,
    segments: list[dict],
    colors: Sequence[Sequence[int]],
    ringed: np.ndarray,
    *,
    height_px: int = 520,
    width_px: int = 640,
) -> go.Figure:
    """The planner's exposure map as a plotly figure (for its brief): every place in its ``(K,)`` RGBA colour (as on
    :func:`app.figures.plan_charts.exposure_deck`), the ``ringed`` places (a ``(K,)`` mask) outlined in vermillion."""
    lon = np.asarray(instance.lon, dtype=float)
    lat = np.asarray(instance.lat, dtype=float)
    ringed = np.asarray(ringed, dtype=bool)
    fig = go.Figure()
    fig.add_trace(_roads(segments))
    fig.add_trace(
        go.Scatter(
            x=lon,
            y=lat,
            mode="markers",
            name="Places (darker: the attacker guesses closer)",
            marker={"size": 6, "color": [_rgba(c) for c in colors], "line": {"width": 0}},
            hoverinfo="skip",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=lon[ringed],
            y=lat[ringed],
            mode="markers",
            name="The worst-off 10 %",
            marker={"size": 9, "color": "rgba(0,0,0,0)", "line": {"width": 1.5, "color": "#D55E00"}},
            hoverinfo="skip",
        )
    )
    _fit_view(fig, lon, lat)
    _layout(fig, width_px, height_px, instance.network.attribution)
    return fig
