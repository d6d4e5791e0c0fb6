"""The class round's maps (pure: return a ``pdk.Deck``, no streamlit calls).

A student's map: the roads, every place as a tappable dot (the layer ``places``), the report(s) the student
received (white with a dark rim), their guess (near-black), and after the reveal the truth (orange) and the
Bayes attacker's guess (blue). The lecturer's map: the class's guesses as they arrive (bigger = more
students), and after the reveal the true place(s) and a line from each guess to its truth.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import pydeck as pdk
import shapely

import panda
from app.figures.lesson_maps import A_COLOR, B_COLOR, GUESS_COLOR, CompactDeck
from app.figures.maps import TOOLTIP_STYLE, SharedRows, fit_view, roads_layer
from app.model.landmarks import Landmark

__all__ = ["student_deck", "student_legend", "host_deck", "tap_cells", "PLACES", "STUDENT_MARKERS"]

PLACES = "places"
REPORT_FILL = [255, 255, 255, 255]
#: The Bayes attacker's likeliest places drawn on the projector's map at a question's reveal.
BELIEF_PLACES = 40
RIM = [20, 20, 20, 255]
#: A student's markers: radius and outline width, pixels, before and after the reveal. Drawn largest first, so
#: markers on one place nest as rings (the truth's orange around the Bayes attacker's blue around the white
#: report around the black guess): each ring at least 2.5 px wide even when all four are on the same place.
STUDENT_MARKERS = {
    "open": {"report": (12.0, 2.0), "guess": (8.5, 1.5)},
    "revealed": {"truth": (16.0, 1.0), "bayes": (12.0, 1.0), "report": (8.0, 2.0), "guess": (4.0, 1.0)},
}


def _pos(instance: panda.Instance, x: int) -> list[float]:
    return [round(float(instance.lon[x]), 6), round(float(instance.lat[x]), 6)]


def _kept(instance: panda.Instance, name: str, build: Callable[[panda.Instance], list[dict]]) -> SharedRows:
    """Rows every map of this instance draws alike, built once and kept with the instance (the server's cached
    instance is shared by every session; its ``_cache`` goes with it and is dropped when it is pickled)."""
    cache = instance._cache  # noqa: SLF001 (the instance's own memo, as its distance tables use it)
    if name not in cache:
        cache[name] = SharedRows(build(instance))
    return cache[name]


def _place_rows(instance: panda.Instance) -> list[dict]:
    lon, lat = np.round(instance.lon.astype(float), 6).tolist(), np.round(instance.lat.astype(float), 6).tolist()
    return [{"p": [lon[x], lat[x]]} for x in range(instance.n_records)]  # drawn only: the cells take the taps


def tap_cells(lon: np.ndarray, lat: np.ndarray, *, margin: float = 0.6) -> list[list[list[float]]]:
    """Each place's cell: the part of the map nearer to it than to any other place (its Voronoi cell, on a local
    plane: longitudes scaled by the cosine of the mean latitude), within the places' box widened by ``margin``
    of its size on every side. A tap anywhere in a cell is a tap on its place. Open rings of ``[lon, lat]`` (deck.gl
    closes them), to 5 decimals (about a metre)."""
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    kx = max(math.cos(math.radians(float(lat.mean()))), 0.05)
    x, y = lon * kx, lat
    points = shapely.points(x, y)
    dx, dy = max(np.ptp(x), 1e-4) * margin, max(np.ptp(y), 1e-4) * margin
    box = shapely.box(x.min() - dx, y.min() - dy, x.max() + dx, y.max() + dy)
    cells = shapely.get_parts(shapely.voronoi_polygons(shapely.multipoints(points), extend_to=box, ordered=True))
    rings = []
    for cell in shapely.intersection(cells, box):
        ring = np.asarray(cell.exterior.coords)[:-1]
        rings.append(np.round(np.c_[ring[:, 0] / kx, ring[:, 1]], 5).tolist())
    return rings


def _cell_rows(instance: panda.Instance) -> list[dict]:
    rings = tap_cells(instance.lon, instance.lat)
    return [{"polygon": ring, "x": x, "tooltip": f"Place {x}"} for x, ring in enumerate(rings)]


def _places(instance: panda.Instance, *, radius_px: float, pickable: bool) -> list[pdk.Layer]:
    """The places as dots; while ``pickable``, under an invisible layer of their cells (id :data:`PLACES`) that
    takes every tap on the map for the nearest place (a dot of a few pixels is hard to hit with a finger)."""
    dots = pdk.Layer(
        "ScatterplotLayer",
        data=_kept(instance, "map_places", _place_rows),
        id="place_dots",
        get_position="p",
        get_fill_color=[70, 130, 180, 110],
        get_radius=radius_px,
        radius_units="'pixels'",
        pickable=False,
    )
    if not pickable:
        return [dots]
    cells = pdk.Layer(
        "PolygonLayer",
        data=_kept(instance, "map_tap_cells", _cell_rows),
        id=PLACES,
        get_polygon="polygon",
        # Nearly transparent, not invisible: deck.gl does not pick what it does not draw.
        get_fill_color=[255, 255, 255, 1],
        stroked=False,
        pickable=True,
        auto_highlight=True,
        highlight_color=[70, 130, 180, 40],
    )
    return [cells, dots]


def _markers(
    data: list[dict], layer_id: str, radius_px: float | str = 9, *, line_px: float | str = 3, pickable: bool = True
) -> pdk.Layer:
    """Markers with an outline; ``radius_px`` and ``line_px``: a number, or the name of each datum's field."""
    return pdk.Layer(
        "ScatterplotLayer",
        data=data,
        id=layer_id,
        get_position="p",
        get_fill_color="c",
        get_radius=radius_px,
        radius_units="'pixels'",
        stroked=True,
        get_line_color="l",
        get_line_width=line_px,
        line_width_units="'pixels'",
        pickable=pickable,
    )


def _deck(layers: list[pdk.Layer], instance: panda.Instance, width_px: int, height_px: int) -> pdk.Deck:
    return CompactDeck(
        layers=layers,
        initial_view_state=fit_view(instance.lon, instance.lat, width_px=width_px, height_px=height_px),
        map_provider=None,
        tooltip={"text": "{tooltip}", "style": TOOLTIP_STYLE},
    )


def student_deck(
    instance: panda.Instance,
    segments: list[dict],
    *,
    reports: list[int],
    guess: int | None = None,
    secret: int | None = None,
    bayes_place: int | None = None,
    landmarks: Sequence[Landmark] = (),
    width_px: int = 380,
    height_px: int = 420,
) -> pdk.Deck:
    """A student's map: tap a place to guess; after the reveal, the truth and the Bayes attacker's guess.
    ``landmarks`` (:func:`app.model.landmarks.landmarks`) are drawn as labelled squares."""
    outputs = np.asarray(instance.outputs)
    revealed = secret is not None
    layers = [roads_layer(segments), *_places(instance, radius_px=4.5 if not revealed else 2.5, pickable=not revealed)]
    sizes = STUDENT_MARKERS["revealed" if revealed else "open"]

    def mark(kind: str, x: int, fill: list[int], line: list[int], tooltip: str) -> dict:
        r, w = sizes[kind]
        return {"p": _pos(instance, x), "c": fill, "l": line, "r": r, "w": w, "tooltip": tooltip}

    marks = [mark("report", int(outputs[j]), REPORT_FILL, RIM, f"Your report {n + 1}") for n, j in enumerate(reports)]
    if guess is not None:
        marks.append(mark("guess", guess, GUESS_COLOR, REPORT_FILL, "Your guess"))
    if revealed:
        if bayes_place is not None:
            marks.append(mark("bayes", bayes_place, B_COLOR, REPORT_FILL, "The Bayes attacker's guess"))
        marks.append(mark("truth", secret, A_COLOR, REPORT_FILL, "Where it was made"))
        if guess is not None:
            layers.append(_line([(guess, secret)], instance))
    layers += _landmark_layers(landmarks)
    marks.sort(key=lambda m: -m["r"])  # deck.gl draws later data on top: the smaller markers last
    # Not pickable while the round is open: a tap on the guess or a report reaches the place under it.
    layers.append(_markers(marks, "marks", radius_px="r", line_px="w", pickable=revealed))
    return _deck(layers, instance, width_px, height_px)


def _landmark_layers(landmarks: Sequence[Landmark]) -> list[pdk.Layer]:
    if not landmarks:
        return []
    # Labels run away from the map's middle (one near the right edge would be cut off).
    mid = (min(m.lon for m in landmarks) + max(m.lon for m in landmarks)) / 2
    rows = [
        {"p": [round(m.lon, 6), round(m.lat, 6)], "label": m.label, "a": "start" if m.lon <= mid else "end"}
        for m in landmarks
    ]
    square = pdk.Layer(
        "ScatterplotLayer",
        data=rows,
        id="landmark_marks",
        get_position="p",
        get_fill_color=[90, 90, 90, 220],
        get_radius=3.5,
        radius_units="'pixels'",
        pickable=False,
    )
    text = pdk.Layer(
        "TextLayer",
        data=rows,
        id="landmarks",
        get_position="p",
        get_text="label",
        get_size=13,
        get_color=[40, 40, 40, 255],
        get_text_anchor="a",
        get_alignment_baseline="'center'",
        font_family="'sans-serif'",
        background=True,
        get_background_color=[255, 255, 255, 210],
        pickable=False,
    )
    return [square, text]


def student_legend(n_reports: int, *, guess: int | None, secret: int | None, bayes_place: int | None) -> str:
    """The student's map caption: one colour per marker drawn ("White: your report · black: your guess · ...")."""
    parts = [f"White: your report{'s' if n_reports > 1 else ''}"]
    if guess is not None or secret is None:
        parts.append("black: your guess")
    if secret is not None:
        parts.append(f"orange: where {'they were' if n_reports > 1 else 'it was'} made")
        if bayes_place is not None:
            parts.append("blue: the Bayes attacker's guess")
    return " · ".join(parts)


def _line(pairs: list[tuple[int, int]], instance: panda.Instance) -> pdk.Layer:
    return pdk.Layer(
        "LineLayer",
        data=[{"s": _pos(instance, g), "t": _pos(instance, t)} for g, t in pairs],
        id="to_truth",
        get_source_position="s",
        get_target_position="t",
        get_color=[60, 60, 60, 160],
        get_width=2,
        width_min_pixels=1,
        pickable=False,
    )


def _belief_layer(instance: panda.Instance, belief: np.ndarray) -> pdk.Layer:
    """The Bayes attacker's likeliest places (:data:`BELIEF_PLACES`) as blue discs, darker and larger where it
    believes more."""
    b = np.asarray(belief, dtype=float)
    top = [int(x) for x in np.argsort(-b)[:BELIEF_PLACES] if b[x] > 0]
    peak = float(b[top[0]]) if top else 1.0
    data = [
        {
            "p": _pos(instance, x),
            "c": [*B_COLOR[:3], int(40 + 180 * b[x] / peak)],
            "l": [*B_COLOR[:3], 0],
            "r": 4 + 10 * math.sqrt(b[x] / peak),
            "w": 0,
            "tooltip": f"Place {x}: the attacker believes {100 * b[x]:.1f} %",
        }
        for x in top
    ]
    return _markers(data, "belief", radius_px="r", line_px="w", pickable=True)


def host_deck(
    instance: panda.Instance,
    segments: list[dict],
    *,
    guesses: list[int],
    entries: list[dict] | None = None,
    shared_place: int | None = None,
    reports: list[int] | None = None,
    first_guesses: list[int] | None = None,
    belief: np.ndarray | None = None,
    pooled_place: int | None = None,
    width_px: int = 700,
    height_px: int = 520,
) -> pdk.Deck:
    """The lecturer's map: the guesses as a heat cloud and dots as they arrive; after the reveal (``entries`` with
    secrets) the truth.

    ``reports``: a question round's reports (the same on every phone), white; ``first_guesses``: the first vote's
    guesses after a second vote, grey rings; ``belief``: ``(K,)`` the Bayes attacker's posterior, blue discs (its
    likeliest places); ``pooled_place``: the guess of the class as one attacker (every report pooled), a blue ring.
    """
    layers = [roads_layer(segments), *_places(instance, radius_px=2.5, pickable=False)]
    if belief is not None:
        layers.append(_belief_layer(instance, belief))
    counts = Counter(int(g) for g in guesses)
    if counts:  # where the room's guesses gather, whatever the dots' overlap
        layers.append(
            pdk.Layer(
                "HeatmapLayer",
                data=[{"p": _pos(instance, g), "w": n} for g, n in sorted(counts.items())],
                id="guess_cloud",
                get_position="p",
                get_weight="w",
                radius_pixels=45,
                opacity=0.55,
            )
        )
    marks = [
        {
            "p": _pos(instance, g),
            "c": GUESS_COLOR,
            "l": REPORT_FILL,
            "r": 7 + 3 * min(n - 1, 6),
            "tooltip": f"Place {g}: {n} guess{'es' if n > 1 else ''}",
        }
        for g, n in sorted(counts.items())
    ]
    if entries:
        pairs = [(int(e["guess"]), int(e["secret"])) for e in entries if e.get("guess") is not None]
        if pairs:
            layers.append(_line(pairs, instance))
        truths = Counter(int(e["secret"]) for e in entries)
        marks += [
            {"p": _pos(instance, t), "c": A_COLOR, "l": REPORT_FILL, "r": 10, "tooltip": f"The truth: place {t}"}
            for t in sorted(truths)
        ]
    elif shared_place is not None and entries is not None:
        marks.append({"p": _pos(instance, shared_place), "c": A_COLOR, "l": REPORT_FILL, "r": 10, "tooltip": "Truth"})
    marks += [
        {
            "p": _pos(instance, g),
            "c": [0, 0, 0, 0],
            "l": [110, 110, 110, 255],
            "r": 9,
            "tooltip": f"First vote: place {g}",
        }
        for g in (first_guesses or [])
    ]
    outputs = np.asarray(instance.outputs)
    marks += [
        {"p": _pos(instance, int(outputs[j])), "c": REPORT_FILL, "l": RIM, "r": 9, "tooltip": f"The report {n + 1}"}
        for n, j in enumerate(reports or [])
    ]
    if pooled_place is not None:
        marks.append(
            {
                "p": _pos(instance, pooled_place),
                "c": [*B_COLOR[:3], 90],
                "l": B_COLOR,
                "r": 16,
                "tooltip": f"The class as one attacker: every report pooled (place {pooled_place})",
            }
        )
    layers.append(
        pdk.Layer(
            "ScatterplotLayer",
            data=marks,
            id="guesses",
            get_position="p",
            get_fill_color="c",
            get_radius="r",
            radius_units="'pixels'",
            stroked=True,
            get_line_color="l",
            line_width_min_pixels=2,
            pickable=True,
        )
    )
    return _deck(layers, instance, width_px, height_px)
