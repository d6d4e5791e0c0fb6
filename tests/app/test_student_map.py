"""A student's map (the class round): after the reveal the caption names orange and blue too, and close markers
nest (smaller on top); before it, a tap anywhere is a tap on the nearest place, among a few landmarks.
"""

from __future__ import annotations

import json

import numpy as np
import shapely
from apptest_support import clear_caches, release_resources  # noqa: F401
from pydeck.bindings.json_tools import default_serialize

import panda
from app.figures import game_maps
from app.model import landmarks


# ---------------------------------------------------------------------------------------------
# A student's map after the reveal
def test_the_students_caption_names_every_colour_drawn():
    before = game_maps.student_legend(1, guess=None, secret=None, bayes_place=None)
    assert before == "White: your report · black: your guess"
    after = game_maps.student_legend(1, guess=3, secret=5, bayes_place=7)
    assert "orange: where it was made" in after and "blue: the Bayes attacker's guess" in after
    assert "blue" not in game_maps.student_legend(2, guess=None, secret=5, bayes_place=None)
    assert "black" not in game_maps.student_legend(2, guess=None, secret=5, bayes_place=None)


def test_close_markers_nest_with_the_smaller_on_top():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=60, n_users=5, n_outputs=20, seed=0)
    place = int(inst.outputs[0])  # report, guess, truth and the attacker's guess all on one place
    deck = game_maps.student_deck(inst, [], reports=[0], guess=place, secret=place, bayes_place=place)
    marks = next(layer for layer in deck.layers if layer.id == "marks").data
    radii = [m["r"] for m in marks]
    assert radii == sorted(radii, reverse=True), "deck.gl draws later data on top: the smaller ones last"
    # Each marker shows a ring of its own colour at least 2.5 px wide around the next one's outline.
    for outer, inner in zip(marks, marks[1:], strict=False):
        assert (outer["r"] - outer["w"] / 2) - (inner["r"] + inner["w"] / 2) >= 2.5


# ---------------------------------------------------------------------------------------------
# Guessing on a phone (issue 39 item 4): a tap anywhere is a tap on the nearest place


def _local_xy(lon, lat, lat0):
    return np.c_[np.asarray(lon) * np.cos(np.radians(lat0)), np.asarray(lat)]


def test_a_tap_anywhere_in_the_box_lands_in_the_cell_of_the_nearest_place():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=300, n_users=5, n_outputs=20, seed=3)
    lon, lat = inst.lon.astype(float), inst.lat.astype(float)
    cells = [shapely.Polygon(ring) for ring in game_maps.tap_cells(lon, lat)]
    assert len(cells) == inst.n_records and all(c.is_valid for c in cells)
    rng = np.random.default_rng(0)
    taps_lon = rng.uniform(lon.min() - 0.5 * np.ptp(lon), lon.max() + 0.5 * np.ptp(lon), 2000)
    taps_lat = rng.uniform(lat.min() - 0.5 * np.ptp(lat), lat.max() + 0.5 * np.ptp(lat), 2000)
    lat0 = float(lat.mean())
    places, taps = _local_xy(lon, lat, lat0), _local_xy(taps_lon, taps_lat, lat0)
    dist = np.sqrt(((taps[:, None, :] - places[None, :, :]) ** 2).sum(-1))
    nearest = dist.min(axis=1)
    tree = shapely.STRtree(cells)
    # The rings are rounded to 5 decimals (about a metre): a tap within 3e-5 degrees (3 m) of the line between two
    # places may fall to either.
    for i, (x, y) in enumerate(zip(taps_lon, taps_lat, strict=True)):
        hits = tree.query(shapely.Point(x, y), predicate="intersects")
        assert hits.size, f"a tap at {x:.5f}, {y:.5f} fell in no cell"
        assert dist[i, hits].min() <= nearest[i] + 3e-5, f"a tap at {x:.5f}, {y:.5f}: cell {hits} is not the nearest"
    # Each place lies in its own cell, and the cells tile the widened box (no gaps, no overlaps).
    assert all(c.buffer(1e-9).contains(shapely.Point(a, b)) for c, a, b in zip(cells, lon, lat, strict=True))
    union = shapely.union_all(cells)
    assert abs(sum(c.area for c in cells) - union.area) < 1e-9 * union.area + 1e-12


def test_the_phones_map_takes_taps_on_cells_and_draws_the_places_as_dots():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=60, n_users=5, n_outputs=20, seed=0)
    deck = game_maps.student_deck(inst, [], reports=[0])
    layers = {layer.id: layer for layer in deck.layers}
    cells = layers[game_maps.PLACES]
    assert cells.type == "PolygonLayer" and cells.pickable
    assert [row["x"] for row in cells.data] == list(range(inst.n_records))
    assert not layers["place_dots"].pickable
    assert not any(layer.pickable for name, layer in layers.items() if name != game_maps.PLACES)
    # After the reveal nothing is a guess any more: no cells to tap.
    revealed = game_maps.student_deck(inst, [], reports=[0], guess=1, secret=2, bayes_place=3)
    assert game_maps.PLACES not in {layer.id for layer in revealed.layers}
    # The JSON a page sends is the same whether the shared rows are spliced in or written out.
    assert json.loads(deck.to_json()) == json.loads(
        json.dumps(deck, sort_keys=True, default=default_serialize, separators=(",", ":"))
    )


def test_landmarks_are_a_few_known_buildings_spread_over_the_places():
    inst = panda.make_instance(panda.load_city("neubrandenburg"), n_records=500, n_users=5, n_outputs=20, seed=0)
    marks = landmarks.landmarks("city:neubrandenburg", inst.lon, inst.lat)
    assert 3 <= len(marks) <= landmarks.MAX_LANDMARKS
    assert all(m.label in landmarks.LANDMARK_KINDS.values() for m in marks)
    assert len({m.label for m in marks}) >= len(marks) - 1  # mostly different kinds
    lon, lat = inst.lon.astype(float), inst.lat.astype(float)
    assert all(lon.min() <= m.lon <= lon.max() and lat.min() <= m.lat <= lat.max() for m in marks)
    # Each one a real point of interest of its kind.
    pois = panda.load_pois("neubrandenburg")
    kinds = {v: k for k, v in landmarks.LANDMARK_KINDS.items()}
    for m in marks:
        at = np.flatnonzero((pois.lon == m.lon) & (pois.lat == m.lat))
        assert at.size and kinds[m.label] in set(pois.kind[at])
    # Spread out: no two closer than a tenth of the box's diagonal.
    xy = _local_xy([m.lon for m in marks], [m.lat for m in marks], float(lat.mean()))
    diag = float(np.hypot(*np.ptp(_local_xy(lon, lat, float(lat.mean())), axis=0)))
    gaps = [np.hypot(*(a - b)) for i, a in enumerate(xy) for b in xy[i + 1 :]]
    assert min(gaps) > diag / 10
    deck = game_maps.student_deck(inst, [], reports=[0], landmarks=marks)
    labels = next(layer for layer in deck.layers if layer.id == "landmarks").data
    assert [row["label"] for row in labels] == [m.label for m in marks]


def test_no_landmarks_without_shipped_points_of_interest():
    assert landmarks.landmarks("file:0123456789abcdef", np.array([1.0, 2.0]), np.array([1.0, 2.0])) == []
    assert landmarks.landmarks("bbox:13.2,53.5,13.3,53.6", np.array([13.25]), np.array([53.55])) == []
