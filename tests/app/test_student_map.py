"""A student's map after the reveal (the class round): the caption names orange and blue too, and close
markers nest (smaller on top).
"""

from __future__ import annotations

from apptest_support import clear_caches, release_resources  # noqa: F401

import panda
from app.figures import game_maps


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
