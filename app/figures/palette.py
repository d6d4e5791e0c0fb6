"""The dashboard's colours, chosen to stay apart for people with colour-vision deficiencies.

About one man in twelve sees colours differently (protanopia and deuteranopia: red and green
collapse; tritanopia, rarer: blue and yellow collapse). Common palettes fail where the lesson needs
them, as the functions below show: a heat from yellow to dark red passes through a crimson like place
A's, so under deuteranopia A's marker vanishes into its own heat discs; and matplotlib's "tab10" puts
EM blue and LP+EM purple, LP+CA olive and PAnDA-p orange, far below :data:`MIN_DELTA_E` apart under
protanopia or deuteranopia. So:

* **Heat** (where a place's reports land, the attacker's belief, the violation lines): **cividis**
  (Nuñez, Anderton and Renslow 2018, matplotlib's ``cividis``), a blue-to-yellow map built to look
  the same to viewers with and without red-green deficiency and whose lightness rises monotonically,
  so "darker = more" survives any deficiency and a greyscale print. It runs reversed here: pale
  yellow for unlikely, dark navy for likely (the map's background is white). Sampled at 8 stops of
  matplotlib's 256-entry table, linear in between.
* **Categories** (place A and B, the ring, the mechanisms of the curve): **Okabe-Ito** (Okabe and
  Ito 2008, "Color Universal Design"), eight colours picked to stay distinct for the three
  dichromacies. A is *vermillion*, B is *blue*, the attacker's guess *black*; the words in the pages
  say "orange" for A and "blue" for B.

:func:`simulate_cvd` applies Machado, Oliveira and Fernandes (2009)'s matrices (severity 1.0, on linear
sRGB, the ones Chrome's and Firefox's DevTools use) and :func:`delta_e_2000` measures the distance
(CIEDE2000, Sharma, Wu and Dalal 2005) between what the viewer sees; tests/app/test_palette.py asserts
that every pair that must be told apart stays at least :data:`MIN_DELTA_E` apart under each
deficiency. Pure: numpy only, no streamlit.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "OKABE_ITO",
    "CIVIDIS_STOPS",
    "A_RGB",
    "B_RGB",
    "GUESS_RGB",
    "MECHANISM_COLORS",
    "MACHADO_2009",
    "MIN_DELTA_E",
    "hex_to_rgb",
    "heat_rgb",
    "simulate_cvd",
    "srgb_to_lab",
    "delta_e_2000",
]

#: Okabe and Ito (2008), "Color Universal Design": name -> hex.
OKABE_ITO: dict[str, str] = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
}
#: matplotlib's ``cividis`` at 8 evenly spaced entries of its 256-entry table (sRGB in [0, 1]),
#: dark navy (0) to yellow (1).
CIVIDIS_STOPS: tuple[tuple[float, float, float], ...] = (
    (0.000000, 0.135112, 0.304751),
    (0.130669, 0.231458, 0.432840),
    (0.298421, 0.332247, 0.423973),
    (0.425120, 0.431334, 0.447692),
    (0.555393, 0.537807, 0.471147),
    (0.695985, 0.648334, 0.440072),
    (0.849223, 0.771947, 0.359729),
    (0.995737, 0.909344, 0.217772),
)


def hex_to_rgb(color: str) -> tuple[int, int, int]:
    """``"#D55E00"`` -> ``(213, 94, 0)``."""
    text = color.lstrip("#")
    if len(text) != 6:
        raise ValueError(f"The 'color' parameter of hex_to_rgb must be a '#RRGGBB' string. Got {color!r} instead.")
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


#: Place A (and its expected-error ring): Okabe-Ito vermillion. Place B: Okabe-Ito blue.
A_RGB: tuple[int, int, int] = hex_to_rgb(OKABE_ITO["vermillion"])
B_RGB: tuple[int, int, int] = hex_to_rgb(OKABE_ITO["blue"])
#: The attacker's best guess: near-black (it sits on the darkest heat disc, inside a white outline).
GUESS_RGB: tuple[int, int, int] = (20, 20, 20)
#: One Okabe-Ito colour per mechanism of the trade-off curve. At most eight lines are drawn together
#: (the six defaults, the optimal LP, one more PAnDA variant): PAnDA-p and PAnDA-l, never drawn
#: together, share reddish purple. Okabe-Ito has eight colours and its yellow is too light for a line on
#: white, so LP+EM takes Paul Tol's "wine" (#882255, from his colour-blind-safe "muted" scheme);
#: LP+BD (not in the curve's defaults) is grey.
MECHANISM_COLORS: dict[str, str] = {
    "laplace": OKABE_ITO["orange"],
    "em": OKABE_ITO["blue"],
    "em-br": OKABE_ITO["sky blue"],
    "lp-ca": OKABE_ITO["bluish green"],
    "lp-em": "#882255",
    "lp-bd": "#8C8C8C",
    "lp": OKABE_ITO["black"],
    "panda-e": OKABE_ITO["vermillion"],
    "panda-p": OKABE_ITO["reddish purple"],
    "panda-l": OKABE_ITO["reddish purple"],
}


def heat_rgb(t: float | np.ndarray) -> np.ndarray:
    """Reversed cividis: ``t = 0`` (unlikely) pale yellow, ``t = 1`` (likeliest) dark navy.

    Parameters
    ----------
    t
        Value(s) in [0, 1] (clipped).

    Returns
    -------
    numpy.ndarray
        ``uint8`` RGB, shape ``(..., 3)``.
    """
    x = 1.0 - np.clip(np.asarray(t, dtype=float), 0.0, 1.0)  # reversed: 1 -> the navy end
    stops = np.asarray(CIVIDIS_STOPS)
    grid = np.linspace(0.0, 1.0, len(stops))
    rgb = np.stack([np.interp(x, grid, stops[:, k]) for k in range(3)], axis=-1)
    return np.rint(255 * rgb).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# Colour-vision deficiency simulation and colour distance

#: Machado, Oliveira and Fernandes (2009), "A physiologically-based model for simulation of color
#: vision deficiency", severity 1.0: applied to linear sRGB.
MACHADO_2009: dict[str, np.ndarray] = {
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
    "tritanopia": np.array(
        [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]]
    ),
}
#: Least CIEDE2000 distance between two colours that must be told apart, under every deficiency.
#: About 10 is "clearly different at a glance" for marks of a few pixels (2.3 is a just-noticeable
#: difference for large adjacent patches).
MIN_DELTA_E = 10.0


def _to_linear(srgb01: np.ndarray) -> np.ndarray:
    return np.where(srgb01 <= 0.04045, srgb01 / 12.92, ((srgb01 + 0.055) / 1.055) ** 2.4)


def _to_srgb(linear: np.ndarray) -> np.ndarray:
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055)


def simulate_cvd(rgb: np.ndarray | tuple, deficiency: str) -> np.ndarray:
    """What a dichromat sees of sRGB colour(s) ``rgb`` (0..255, shape ``(..., 3)``), as sRGB 0..255 floats.

    ``deficiency`` is ``"protanopia"``, ``"deuteranopia"``, ``"tritanopia"`` or ``"none"``.
    """
    if deficiency != "none" and deficiency not in MACHADO_2009:
        raise ValueError(
            "The 'deficiency' parameter of simulate_cvd must be one of 'none', "
            f"{', '.join(repr(k) for k in MACHADO_2009)}. Got {deficiency!r} instead."
        )
    srgb = np.asarray(rgb, dtype=float)[..., :3] / 255.0
    if deficiency == "none":
        return 255.0 * srgb
    linear = _to_linear(srgb) @ MACHADO_2009[deficiency].T
    return 255.0 * _to_srgb(linear)


#: sRGB (linear) -> CIE XYZ, D65; and the D65 white.
_RGB_TO_XYZ = np.array(
    [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750], [0.0193339, 0.1191920, 0.9503041]]
)
_WHITE_D65 = np.array([0.95047, 1.0, 1.08883])


def srgb_to_lab(rgb: np.ndarray | tuple) -> np.ndarray:
    """CIELAB (D65) of sRGB colour(s) ``rgb`` (0..255, shape ``(..., 3)``)."""
    xyz = _to_linear(np.asarray(rgb, dtype=float)[..., :3] / 255.0) @ _RGB_TO_XYZ.T / _WHITE_D65
    eps = (6 / 29) ** 3
    f = np.where(xyz > eps, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def delta_e_2000(lab1: np.ndarray | tuple, lab2: np.ndarray | tuple) -> np.ndarray:
    """CIEDE2000 colour difference of CIELAB colours (Sharma, Wu and Dalal 2005; kL = kC = kH = 1)."""
    lab1, lab2 = np.asarray(lab1, dtype=float), np.asarray(lab2, dtype=float)
    L1, a1, b1 = lab1[..., 0], lab1[..., 1], lab1[..., 2]
    L2, a2, b2 = lab2[..., 0], lab2[..., 1], lab2[..., 2]
    c_bar = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_bar**7 / (c_bar**7 + 25.0**7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.where((a1p == 0) & (b1 == 0), 0.0, np.degrees(np.arctan2(b1, a1p)) % 360)
    h2p = np.where((a2p == 0) & (b2 == 0), 0.0, np.degrees(np.arctan2(b2, a2p)) % 360)
    d_l = L2 - L1
    d_c = c2p - c1p
    dh = h2p - h1p
    dh = np.where(dh > 180, dh - 360, np.where(dh < -180, dh + 360, dh))
    dh = np.where(c1p * c2p == 0, 0.0, dh)
    d_h = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    l_bar = (L1 + L2) / 2
    c_bar_p = (c1p + c2p) / 2
    h_sum = h1p + h2p
    h_bar = np.where(
        c1p * c2p == 0,
        h_sum,
        np.where(np.abs(h1p - h2p) <= 180, h_sum / 2, np.where(h_sum < 360, (h_sum + 360) / 2, (h_sum - 360) / 2)),
    )
    t = (
        1
        - 0.17 * np.cos(np.radians(h_bar - 30))
        + 0.24 * np.cos(np.radians(2 * h_bar))
        + 0.32 * np.cos(np.radians(3 * h_bar + 6))
        - 0.20 * np.cos(np.radians(4 * h_bar - 63))
    )
    s_l = 1 + 0.015 * (l_bar - 50) ** 2 / np.sqrt(20 + (l_bar - 50) ** 2)
    s_c = 1 + 0.045 * c_bar_p
    s_h = 1 + 0.015 * c_bar_p * t
    r_t = (
        -2
        * np.sqrt(c_bar_p**7 / (c_bar_p**7 + 25.0**7))
        * np.sin(np.radians(60 * np.exp(-(((h_bar - 275) / 25) ** 2))))
    )
    return np.sqrt((d_l / s_l) ** 2 + (d_c / s_c) ** 2 + (d_h / s_h) ** 2 + r_t * (d_c / s_c) * (d_h / s_h))
