"""The dashboard's colours stay apart under protanopia, deuteranopia and tritanopia (app/figures/palette.py).

The CVD simulation is Machado et al. (2009) at severity 1.0 and the distance CIEDE2000; the distance
is first checked against Sharma, Wu and Dalal (2005)'s published test pairs, and the simulation against
a pair it must collapse (the red and green of matplotlib's tab10 under deuteranopia), so a broken
simulation or metric cannot make the palette checks pass.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from app.figures import curve_charts, lesson_charts, lesson_maps, maps, palette
from panda.tradeoff import DEFAULT_METHODS

DEFICIENCIES = ("none", "protanopia", "deuteranopia", "tritanopia")
#: A fine grid of heat values (the map's discs take any value in [0, 1]).
HEAT_T = np.linspace(0.0, 1.0, 41)


def seen_delta_e(c1, c2, deficiency: str) -> np.ndarray:
    """CIEDE2000 between what a viewer with ``deficiency`` sees of sRGB colours c1 and c2 (0..255)."""
    lab1 = palette.srgb_to_lab(palette.simulate_cvd(np.asarray(c1, dtype=float), deficiency))
    lab2 = palette.srgb_to_lab(palette.simulate_cvd(np.asarray(c2, dtype=float), deficiency))
    return palette.delta_e_2000(lab1, lab2)


# ---------------------------------------------------------------------------------------------
# The instruments


@pytest.mark.parametrize(
    ("lab1", "lab2", "expected"),
    [  # Sharma, Wu and Dalal (2005), table 1: pairs 1, 7, 17, 19, 25, 34
        ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
        ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
        ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492),
        ((50.0, 2.49, -0.001), (50.0, -2.49, 0.0011), 7.2195),
        ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
        ((22.7233, 20.0904, -46.694), (23.0331, 14.973, -42.5619), 2.0373),
    ],
)
def test_ciede2000_matches_sharma_2005(lab1, lab2, expected):
    assert float(palette.delta_e_2000(lab1, lab2)) == pytest.approx(expected, abs=5e-5)
    assert float(palette.delta_e_2000(lab2, lab1)) == pytest.approx(expected, abs=5e-5)


def test_lab_of_white_black_and_srgb_red():
    np.testing.assert_allclose(palette.srgb_to_lab((255, 255, 255)), [100.0, 0.0, 0.0], atol=0.01)
    np.testing.assert_allclose(palette.srgb_to_lab((0, 0, 0)), [0.0, 0.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(palette.srgb_to_lab((255, 0, 0)), [53.24, 80.09, 67.20], atol=0.05)


@pytest.mark.parametrize("deficiency", DEFICIENCIES[1:])
def test_simulation_keeps_greys_and_collapses_a_known_confusion(deficiency):
    for grey in (0, 128, 255):
        np.testing.assert_allclose(palette.simulate_cvd((grey, grey, grey), deficiency), [grey] * 3, atol=1.0)
    red, green = palette.hex_to_rgb("#d62728"), palette.hex_to_rgb("#2ca02c")  # tab10's red and green
    if deficiency == "deuteranopia":
        assert seen_delta_e(red, green, "none") > 60
        assert seen_delta_e(red, green, deficiency) < 15  # the pair the old curve relied on
    blue, yellow = (0, 0, 255), (255, 255, 0)
    if deficiency == "tritanopia":
        # Tritanopes confuse blue with green and yellow with pink: the blue channel is driven by red and green.
        assert seen_delta_e((0, 160, 170), (0, 170, 90), deficiency) < seen_delta_e((0, 160, 170), (0, 170, 90), "none")
    assert seen_delta_e(blue, yellow, deficiency) > 40  # lightness alone keeps these apart


def test_bad_arguments_say_what_to_do():
    with pytest.raises(ValueError, match="'deficiency' parameter of simulate_cvd must be one of"):
        palette.simulate_cvd((0, 0, 0), "achromatopsia")
    with pytest.raises(ValueError, match="'#RRGGBB'"):
        palette.hex_to_rgb("red")


# ---------------------------------------------------------------------------------------------
# The palette


@pytest.mark.parametrize("deficiency", DEFICIENCIES)
def test_place_a_and_b_stay_apart(deficiency):
    assert seen_delta_e(palette.A_RGB, palette.B_RGB, deficiency) >= 3 * palette.MIN_DELTA_E


@pytest.mark.parametrize("deficiency", DEFICIENCIES)
def test_the_markers_stand_out_from_every_heat_colour(deficiency):
    heat = palette.heat_rgb(HEAT_T)
    # A's marker and ring sit on A's own heat; B's marker and the guess sit on the heat too.
    for name, color in (("A", palette.A_RGB), ("B", palette.B_RGB)):
        d = seen_delta_e(np.broadcast_to(color, heat.shape), heat, deficiency)
        assert d.min() >= palette.MIN_DELTA_E, f"{name} vs heat t={HEAT_T[d.argmin()]:.3f}: {d.min():.1f}"
    d_guess = seen_delta_e(palette.GUESS_RGB, palette.heat_rgb(1.0), deficiency)
    assert d_guess >= palette.MIN_DELTA_E
    assert seen_delta_e(palette.GUESS_RGB, palette.A_RGB, deficiency) >= palette.MIN_DELTA_E


@pytest.mark.parametrize("deficiency", DEFICIENCIES)
def test_heat_keeps_its_order_and_its_steps(deficiency):
    seen = palette.srgb_to_lab(palette.simulate_cvd(palette.heat_rgb(HEAT_T), deficiency))
    lightness = seen[:, 0]
    assert np.all(np.diff(lightness) < 0), "darker must mean likelier for every viewer"
    assert lightness[0] - lightness[-1] > 60
    quarters = palette.heat_rgb(np.linspace(0.0, 1.0, 5))
    steps = seen_delta_e(quarters[:-1], quarters[1:], deficiency)
    assert steps.min() >= palette.MIN_DELTA_E, steps


@pytest.mark.parametrize("extra", ["panda-p", "panda-l"])
@pytest.mark.parametrize("deficiency", DEFICIENCIES)
def test_mechanisms_drawn_together_stay_apart(deficiency, extra):
    # The Lesson's curve: the default methods, the optimal LP, and the selected PAnDA variant.
    shown = (*DEFAULT_METHODS, "lp", extra)
    worst = min(
        (
            float(
                seen_delta_e(
                    palette.hex_to_rgb(palette.MECHANISM_COLORS[a]),
                    palette.hex_to_rgb(palette.MECHANISM_COLORS[b]),
                    deficiency,
                )
            ),
            a,
            b,
        )
        for a, b in itertools.combinations(shown, 2)
    )
    assert worst[0] >= palette.MIN_DELTA_E, worst


def test_the_old_colours_failed_these_checks():
    """The checks have teeth: the curve's old colours (tab10) and the old yellow-to-red heat fail them."""
    em, lp_em = palette.hex_to_rgb("#1f77b4"), palette.hex_to_rgb("#9467bd")
    lp_ca, panda_p = palette.hex_to_rgb("#bcbd22"), palette.hex_to_rgb("#ff7f0e")
    assert seen_delta_e(em, lp_em, "none") > 20
    assert seen_delta_e(em, lp_em, "protanopia") < 3
    assert seen_delta_e(lp_ca, panda_p, "deuteranopia") < 4
    old_heat = np.stack([255 - 75 * HEAT_T, 220 * (1 - HEAT_T) + 20 * HEAT_T, 60 * (1 - HEAT_T)], axis=-1)
    old_a = np.broadcast_to((220, 20, 60), old_heat.shape)
    assert seen_delta_e(old_a, old_heat, "deuteranopia").min() < 6


# ---------------------------------------------------------------------------------------------
# The dashboard uses it


def test_maps_and_charts_draw_with_the_palette():
    assert lesson_maps.A_COLOR[:3] == list(palette.A_RGB)
    assert lesson_maps.B_COLOR[:3] == list(palette.B_RGB)
    assert lesson_maps.GUESS_COLOR[:3] == list(palette.GUESS_RGB)
    assert palette.hex_to_rgb(lesson_charts.A_COLOR) == palette.A_RGB
    assert palette.hex_to_rgb(lesson_charts.B_COLOR) == palette.B_RGB
    assert curve_charts.COLORS == palette.MECHANISM_COLORS
    for t in (0.0, 0.3, 1.0):
        assert maps.heat_color(t)[:3] == palette.heat_rgb(t).tolist()
    # The planar Laplace glow uses the discs' colours: its centre pixel is the likeliest (navy) end.
    uri, _ = lesson_maps.laplace_density_image(13.26, 53.56, 5.0, half_width_km=0.5, size_px=65)
    import base64
    import io

    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGBA"))
    centre = img[32, 32, :3].astype(int)
    assert np.abs(centre - palette.heat_rgb(1.0).astype(int)).max() <= 12, centre
