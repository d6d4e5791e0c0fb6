"""The places' labels with their nearest street (app/model/landmarks.py)."""

from __future__ import annotations

import panda


def test_place_labels_keep_the_number_first_and_add_the_nearest_street():
    """The Lesson's place selectors: "Place 7 · near <street>" from panda.place_names on an embedded city, the bare
    number on a map without shipped names; unique, in place order."""
    from app.model.landmarks import place_labels
    from panda.place_names import place_names

    net = panda.load_city("neubrandenburg")
    inst = panda.make_instance(net, n_records=120, n_users=5, n_outputs=30, seed=1, loss="road")
    labels = place_labels("city:neubrandenburg", inst.lon, inst.lat)
    names = place_names(inst.lon, inst.lat, "neubrandenburg")
    assert len(labels) == len(set(labels)) == inst.n_records
    for x, (label, name) in enumerate(zip(labels, names, strict=True)):
        assert label == (f"Place {x} · {name}" if name.startswith("near ") else f"Place {x}")
    assert sum(" · near " in label for label in labels) > inst.n_records // 2  # a city centre: most are named
    unnamed = place_labels("file:0123456789abcdef", inst.lon, inst.lat)  # an uploaded map: no shipped names
    assert unnamed == tuple(f"Place {x}" for x in range(inst.n_records))
