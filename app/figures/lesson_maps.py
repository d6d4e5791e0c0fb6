"""The Lesson map (pure: returns a ``pdk.Deck``, no streamlit calls).

Two modes: *reports* (where place A's reports land: a disc per output, bigger and darker = likelier,
the expected error as a ring, a few sampled reports, for planar Laplace the smooth noise density) and
*attacker* (for one report, the attacker's belief over the places and its best guess). The places
layer (id ``places``) is pickable: a click on it selects a place. No basemap, no outside request.
"""

from __future__ import annotations

import base64
import functools
import io
import math

import numpy as np
import pydeck as pdk

import panda
from app.figures.maps import CompactDeck as CompactDeck  # re-exported: app/figures/game_maps.py imports it from here
from app.figures.maps import ToLonLat, disc_layer, heat_color, line_layer, map_deck, record_positions, roads_layer
from app.figures.palette import A_RGB, B_RGB, GUESS_RGB, heat_rgb

__all__ = ["build_lesson_deck", "laplace_density_image", "heat_order", "PLACE_LAYER", "MODES"]

PLACE_LAYER = "places"
#: Map mode key -> label (stable option values).
MODES = {"reports": "Reports", "attacker": "Attacker"}
#: Okabe-Ito vermillion (A) and blue (B), the guess near-black: distinct with colour-vision deficiencies.
A_COLOR = [*A_RGB, 255]
B_COLOR = [*B_RGB, 255]
GUESS_COLOR = [*GUESS_RGB, 255]
#: The discs left out (their share of the likeliest one): the attacker's belief, A's reports.
BELIEF_FLOOR = 1e-3
REPORT_FLOOR = 1e-4


def laplace_density_image(
    lon0: float, lat0: float, epsilon_per_km: float, *, half_width_km: float, size_px: int = 160
) -> tuple[str, list[float]]:
    """Planar Laplace's noise density around ``(lon0, lat0)`` as a PNG data URI and its bounds.

    The density ``eps^2 / (2 pi) exp(-eps r)`` per km² (r in km, local tangent plane) is drawn
    with transparency growing as it falls; the image covers a square of ``2 * half_width_km``.

    Returns
    -------
    uri, bounds
        ``data:image/png;base64,...`` and ``[west, south, east, north]`` in degrees.
    """
    uri, bounds = _laplace_density_image(
        float(lon0), float(lat0), float(epsilon_per_km), float(half_width_km), int(size_px)
    )
    return uri, list(bounds)


@functools.lru_cache(maxsize=64)  # one PNG per place and eps, the same for every session (8 % of a rerun)
def _laplace_density_image(
    lon0: float, lat0: float, epsilon_per_km: float, half_width_km: float, size_px: int
) -> tuple[str, tuple[float, ...]]:
    from PIL import Image

    from panda.mechanisms.laplace import planar_laplace_density_grid

    eps = float(epsilon_per_km)
    half = float(half_width_km)
    d_lat = math.degrees(half / panda.network.EARTH_RADIUS_KM)
    d_lon = d_lat / max(math.cos(math.radians(lat0)), 1e-6)
    grid_lon = np.linspace(lon0 - d_lon, lon0 + d_lon, size_px)
    grid_lat = np.linspace(lat0 + d_lat, lat0 - d_lat, size_px)  # image rows run north to south
    density = planar_laplace_density_grid(lon0, lat0, eps, grid_lon, grid_lat)
    rel = density / (eps * eps / (2.0 * math.pi))  # density / its peak
    t = np.clip(rel, 0.0, 1.0) ** 0.5
    rgba = np.zeros((size_px, size_px, 4), dtype=np.uint8)
    rgba[..., :3] = heat_rgb(t)  # the discs' colours (reversed cividis)
    rgba[..., 3] = (170 * np.clip((t - 0.05) / 0.95, 0.0, 1.0)).astype(np.uint8)  # fades out before the edge
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, format="PNG")
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return uri, (lon0 - d_lon, lat0 - d_lat, lon0 + d_lon, lat0 + d_lat)


def build_lesson_deck(
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
) -> pdk.Deck:
    """The Lesson map.

    Parameters
    ----------
    instance
        The view's instance (records, outputs, costs).
    segments
        Road segments of :func:`app.figures.maps.road_segments`.
    place_a, place_b
        Record positions of the two places (B optional).
    row_a
        ``(M,)`` report distribution of place A (reports mode); ``None`` draws no discs.
    ring_m
        Radius of the expected-error ring around A, metres.
    samples
        Output positions of sampled reports from A.
    density
        :func:`laplace_density_image` output (planar Laplace only).
    belief, report, guess
        Attacker mode: ``(K,)`` posterior over the records, the report's output position, the guess.
    height_px, width_px
        The map's size on screen (the initial view fits every place into it).
    """
    pos = record_positions(instance)
    layers: list[pdk.Layer] = [roads_layer(segments)]
    if density is not None:
        layers.append(_density_layer(*density))
    if belief is not None:
        layers.append(_belief_layer(belief, pos))
    elif row_a is not None:
        layers.append(_reports_layer(instance, row_a, place_a, pos))
    # Every place, pickable: a click selects it (drawn above the heat so it can be clicked).
    layers.append(_places_layer(instance, pos))
    if ring_m is not None and math.isfinite(ring_m) and ring_m > 0:
        layers.append(_ring_layer(pos(place_a), ring_m))
    if samples:
        layers.append(_samples_layer(instance, samples, place_a, pos))
    if guess is not None:
        layers.append(_guess_line_layer(pos(guess), pos(place_a)))
    layers.append(_markers_layer(instance, pos, place_a=place_a, place_b=place_b, report=report, guess=guess))
    return map_deck(layers, instance, width_px=width_px, height_px=height_px)


def heat_order(weights: np.ndarray, floor: float) -> tuple[np.ndarray, float]:
    """The discs drawn for ``weights``: their indices, faintest first (the likeliest on top), leaving out those
    under ``floor`` times the largest weight; and that largest weight (1 when none is positive)."""
    w = np.asarray(weights, dtype=float)
    top = float(w.max()) if w.size and w.max() > 0 else 1.0
    order = np.argsort(w)
    return order[w[order] >= top * floor], top


def _density_layer(uri: str, bounds: list[float]) -> pdk.Layer:
    return pdk.Layer("BitmapLayer", id="density", image=f"'{uri}'", bounds=bounds, opacity=0.85, pickable=False)


def _belief_layer(belief: np.ndarray, pos: ToLonLat) -> pdk.Layer:
    """The attacker's belief over the places: bigger and darker = likelier."""
    b = np.asarray(belief, dtype=float)
    shown, top = heat_order(b, BELIEF_FLOOR)
    data = [
        {
            "p": pos(int(x)),
            "r": 3.0 + 13.0 * math.sqrt(b[x] / top),
            "c": heat_color(b[x] / top, alpha_low=120),
            "x": int(x),
            "tooltip": f"Place {int(x)}\nattacker's belief {b[x]:.2%}",
        }
        for x in shown.tolist()
    ]
    return disc_layer("belief", data)


def _reports_layer(instance: panda.Instance, row_a: np.ndarray, place_a: int, pos: ToLonLat) -> pdk.Layer:
    """Where A's reports land: a disc per output, bigger and darker = likelier."""
    probs = np.asarray(row_a, dtype=float)
    shown, top = heat_order(probs, REPORT_FLOOR)
    outputs = np.asarray(instance.outputs)
    cost = instance.cost_m[place_a]
    data = []
    for j in shown.tolist():
        p = float(probs[j])
        t = p / top
        data.append(
            {
                "p": pos(int(outputs[j])),
                "r": 4.0 + 14.0 * math.sqrt(t),
                "c": heat_color(t, alpha_low=120),
                "tooltip": f"Output {j} (place {int(outputs[j])})\nPr[A reports it] = {p:.2%}\n"
                f"loss for A if reported: {cost[j]:,.0f} m",
            }
        )
    return disc_layer("reports", data)


def _places_layer(instance: panda.Instance, pos: ToLonLat) -> pdk.Layer:
    is_output = np.zeros(instance.n_records, dtype=bool)
    is_output[instance.outputs] = True
    return pdk.Layer(
        "ScatterplotLayer",
        data=[
            {
                "p": pos(x),
                "x": x,
                "tooltip": f"Place {x}{' (an output)' if is_output[x] else ''}\nclick to pick it",
            }
            for x in range(instance.n_records)
        ],
        id=PLACE_LAYER,
        get_position="p",
        get_fill_color=[70, 130, 180, 90],
        get_radius=2.5,
        radius_units="'pixels'",
        pickable=True,
        auto_highlight=True,
    )


def _ring_layer(center: list[float], ring_m: float) -> pdk.Layer:
    """A's expected error as a ring around it (in metres: it scales with the map)."""
    return pdk.Layer(
        "ScatterplotLayer",
        data=[{"p": center, "r": float(ring_m), "tooltip": f"expected error {ring_m:,.0f} m"}],
        id="ring",
        get_position="p",
        get_radius="r",
        radius_units="'meters'",
        filled=False,
        stroked=True,
        get_line_color=[*A_RGB, 220],
        line_width_min_pixels=2,
        pickable=False,
    )


def _samples_layer(instance: panda.Instance, samples: list[int], place_a: int, pos: ToLonLat) -> pdk.Layer:
    outputs = np.asarray(instance.outputs)
    cost = instance.cost_m[place_a]
    return pdk.Layer(
        "ScatterplotLayer",
        data=[
            {
                "p": pos(int(outputs[j])),
                "tooltip": f"Sampled report {k + 1}: output {j}\nloss for A: {cost[j]:,.0f} m",
            }
            for k, j in enumerate(samples)
        ],
        id="samples",
        get_position="p",
        get_radius=7,
        radius_units="'pixels'",
        get_fill_color=[255, 255, 255, 255],
        stroked=True,
        get_line_color=[20, 20, 20, 255],
        line_width_min_pixels=2,
        pickable=True,
    )


def _guess_line_layer(guess: list[float], truth: list[float]) -> pdk.Layer:
    data = [{"s": guess, "t": truth}]
    return line_layer("guess_line", data, get_color=GUESS_COLOR, get_width=2, width_min_pixels=2, pickable=False)


def _markers_layer(
    instance: panda.Instance,
    pos: ToLonLat,
    *,
    place_a: int,
    place_b: int | None,
    report: int | None,
    guess: int | None,
) -> pdk.Layer:
    """Place A, place B, the report and the attacker's guess (those given), drawn last: on top."""
    markers = [{"p": pos(place_a), "c": A_COLOR, "tooltip": f"Place A: place {place_a}"}]
    if place_b is not None:
        d_m = 1000 * float(instance.distances_km_pairs(np.array([place_a]), np.array([place_b]))[0])
        markers.append({"p": pos(place_b), "c": B_COLOR, "tooltip": f"Place B: place {place_b}\n{d_m:,.0f} m from A"})
    if report is not None:
        y = int(np.asarray(instance.outputs)[report])
        markers.append({"p": pos(y), "c": [255, 255, 255, 255], "tooltip": f"The report: output {report}"})
    if guess is not None:
        d_m = 1000 * float(instance.distances_km_pairs(np.array([guess]), np.array([place_a]))[0])
        markers.append(
            {
                "p": pos(guess),
                "c": GUESS_COLOR,
                "tooltip": f"Attacker's best guess: place {guess}\n{d_m:,.0f} m from the truth",
            }
        )
    return pdk.Layer(
        "ScatterplotLayer",
        data=markers,
        id="markers",
        get_position="p",
        get_fill_color="c",
        get_radius=9,
        radius_units="'pixels'",
        stroked=True,
        get_line_color=[255, 255, 255, 255],
        line_width_min_pixels=2,
        pickable=True,
    )
