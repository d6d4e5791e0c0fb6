"""Pins today's certificates of :func:`panda.optimal.solve_optimal`, bit for bit.

Small deterministic instances (Kotka: every pair within the floor radius, the dense path; Liechtenstein:
the near-list path), both round solvers (warm dual simplex and restarted PDHG), each stopped by a fixed
number of rounds (PDHG rounds end by steps). The expected values were produced by the code before
``panda/optimal.py`` became a package; any change of rounds, bounds or matrices fails here.

The certificates between rounds are budgeted by time (a share of the rounds' seconds), so the clock
is frozen (``time.perf_counter`` returns a constant): no time passes, every budget check passes, and
which rounds get certified no longer depends on the machine's speed.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

import panda
from panda.optimal import OptimalResult, solve_optimal

EPS = 5.0


def _digest(*arrays: np.ndarray | None) -> str:
    """The sha256 of the arrays' exact bytes (dtype and shape included), first 16 hex digits."""
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def _summary(res: OptimalResult) -> dict:
    """Everything a run states, exactly: floats by repr, arrays by digest."""
    rounds = [
        tuple(repr(e.get(key)) for key in ("rows", "rows_added", "rows_dropped", "iterations", "lower", "upper", "gap"))
        for e in res.rounds
    ]
    return {
        "reason": res.reason,
        "solved": res.solved,
        "bounds": (repr(res.lower_bound), repr(res.upper_bound), repr(res.lower_bound_no_floor), repr(res.gap)),
        "rounds": rounds,
        "matrix": _digest(res.matrix),
        "last_pair_rows": _digest(*res.info["last_pair_rows"]),
        "row_sum_duals": _digest(res.info["row_sum_duals"]),
        "n_pair_rows": res.info["n_pair_rows"],
        "repair_kind": res.info["repair"].get("kind"),
    }


def _run(city: str, k: int, m: int, method: str, **kwargs) -> dict:
    inst = panda.make_instance(panda.load_city(city), n_records=k, n_outputs=m, n_users=10, seed=3)
    cost = inst.prior[:, None] * inst.cost_m
    if kwargs.pop("seed_outputs", False):
        kwargs["seed_sources"] = inst.outputs
    if kwargs.pop("uniform_start", False):
        kwargs["start_matrix"] = np.full((k, m), 1.0 / m)
    res = solve_optimal(cost, inst.d_km, EPS, method=method, gap=0.0, time_limit_s=600.0, **kwargs)
    return _summary(res)


CASES = {
    "kotka-simplex-exact": ("kotka", 30, 15, "simplex", {"seed_outputs": True, "batch": 1.0, "max_rounds": 200}),
    "liechtenstein-simplex-exact": ("liechtenstein", 60, 30, "simplex", {"seed_outputs": True, "max_rounds": 200}),
    "kotka-simplex": ("kotka", 60, 30, "simplex", {"max_rounds": 6}),
    "liechtenstein-simplex-drop": ("liechtenstein", 80, 40, "simplex", {"drop_share": 0.3, "max_rounds": 5}),
    "kotka-pdhg": ("kotka", 40, 20, "pdhg", {"round_steps": 128, "max_rounds": 3, "uniform_start": True}),
    "liechtenstein-pdhg": ("liechtenstein", 60, 30, "pdhg", {"round_steps": 128, "max_rounds": 3}),
}

EXPECTED: dict[str, dict] = {
    "kotka-pdhg": {
        "reason": "max rounds",
        "solved": False,
        "bounds": (
            "100.7939869307634",
            "272.1193249208304",
            "100.78284672430412",
            "0.6295963656381696",
        ),
        "rounds": [
            ("40", "80", "0", "128", "53.32768875697424", "inf", "inf"),
            ("120", "80", "4", "128", "87.79307576508421", "272.1193249208304", "0.6773728738647046"),
            ("196", "80", "7", "128", "100.7939869307634", "272.1193249208304", "0.6295963656381696"),
        ],
        "matrix": "e8242ac2b1b295bd",
        "last_pair_rows": "4281b06ab604421d",
        "row_sum_duals": "426758469540f8ab",
        "n_pair_rows": 156,
        "repair_kind": "sources",
    },
    "kotka-simplex": {
        "reason": "max rounds",
        "solved": False,
        "bounds": (
            "143.59781810964338",
            "364.38996386393535",
            "143.57888294667083",
            "0.605922686270077",
        ),
        "rounds": [
            ("60", "180", "None", "None", "28.625294730908493", "364.38996386393535", "0.9214432405674123"),
            ("240", "180", "None", "None", "68.37567123639049", "364.38996386393535", "0.8123557781028179"),
            ("420", "180", "None", "None", "94.15454672594159", "364.38996386393535", "0.7416104831001896"),
            ("600", "180", "None", "None", "112.3200824021575", "364.38996386393535", "0.6917585731200373"),
            ("780", "180", "None", "None", "128.66160589507206", "364.38996386393535", "0.6469123229115201"),
            ("960", "180", "None", "None", "143.59781810964338", "364.38996386393535", "0.605922686270077"),
        ],
        "matrix": "b4264301197536cc",
        "last_pair_rows": "64f01357c8af1b4e",
        "row_sum_duals": "de812ea48cf1679a",
        "n_pair_rows": 1080,
        "repair_kind": "sources",
    },
    "kotka-simplex-exact": {
        "reason": "no violated row",
        "solved": True,
        "bounds": (
            "262.88673156410096",
            "262.8867315641013",
            "262.8854104986446",
            "1.297366782779926e-15",
        ),
        "rounds": [
            ("465", "388", "None", "None", "114.93044381133652", "314.3095257074408", "0.634339927965423"),
            ("853", "253", "None", "None", "174.05112696529653", "313.89280691268056", "0.4455077557297626"),
            ("1106", "301", "None", "None", "206.26525161920958", "313.89280691268056", "0.3428799670564323"),
            ("1407", "233", "None", "None", "225.8483379813479", "313.89280691268056", "0.28049215207351047"),
            ("1640", "157", "None", "None", "244.0919149750517", "313.89280691268056", "0.2223717472985809"),
            ("1797", "145", "None", "None", "256.24647314002647", "291.5598875373515", "0.1211189052636779"),
            ("1942", "74", "None", "None", "259.42975625937123", "279.48548461824544", "0.07175946323748694"),
            ("2016", "53", "None", "None", "261.16208564399926", "271.55483212090996", "0.03827126328683161"),
            ("2069", "37", "None", "None", "262.4053667139621", "268.15668990337076", "0.0214476215062213"),
            ("2106", "29", "None", "None", "262.87432344172737", "263.2501107618607", "0.0014274915936246981"),
            ("2135", "1", "None", "None", "262.8850275199973", "262.90198664686795", "6.450741238943514e-05"),
            ("2136", "6", "None", "None", "262.8851967024435", "262.90198664686795", "6.386389330326232e-05"),
            ("2142", "0", "None", "None", "262.88673156410096", "262.8867315641013", "1.297366782779926e-15"),
        ],
        "matrix": "7b6f4f9e65463714",
        "last_pair_rows": "abe396bfdeb1614c",
        "row_sum_duals": "e5d2fa7bd336bc0c",
        "n_pair_rows": 2112,
        "repair_kind": "up",
    },
    "liechtenstein-pdhg": {
        "reason": "max rounds",
        "solved": False,
        "bounds": (
            "176.16834585887923",
            "195.00695003413915",
            "175.91886303468723",
            "0.09660478342931834",
        ),
        "rounds": [
            ("60", "180", "0", "128", "143.72888259318285", "inf", "inf"),
            ("240", "180", "5", "128", "159.86299011944058", "195.79209375695507", "0.18350640696510856"),
            ("415", "106", "22", "128", "176.16834585887923", "195.00695003413915", "0.09660478342931834"),
        ],
        "matrix": "b6c69d88198433be",
        "last_pair_rows": "688cbaca54e4e3c4",
        "row_sum_duals": "84ec990d98168a18",
        "n_pair_rows": 355,
        "repair_kind": "sources",
    },
    "liechtenstein-simplex-drop": {
        "reason": "max rounds",
        "solved": False,
        "bounds": (
            "200.20353300929654",
            "202.13614067278968",
            "199.94733417177181",
            "0.00956092095683956",
        ),
        "rounds": [
            ("80", "320", "None", "None", "139.15172224993935", "205.21714371332217", "0.32192934892258723"),
            ("400", "320", "None", "None", "190.09050220074448", "205.21714371332217", "0.07371041833478023"),
            ("720", "260", "None", "None", "197.91843409930055", "205.21714371332217", "0.03556578891000228"),
            ("980", "55", "285", "None", "199.84469613449315", "205.21714371332217", "0.026179331227482918"),
            ("750", "51", "None", "None", "200.20353300929654", "202.13614067278968", "0.00956092095683956"),
        ],
        "matrix": "2035c756c066360c",
        "last_pair_rows": "8ee260a3ec467dc2",
        "row_sum_duals": "95b99f74f322f4a9",
        "n_pair_rows": 721,
        "repair_kind": "sources",
    },
    "liechtenstein-simplex-exact": {
        "reason": "no violated row",
        "solved": True,
        "bounds": (
            "190.00845182720153",
            "190.00845182720326",
            "189.76007256568548",
            "9.124458720559026e-15",
        ),
        "rounds": [
            ("424", "180", "None", "None", "172.00041836239598", "194.2190149257737", "0.114399697536666"),
            ("604", "40", "None", "None", "186.45108629483235", "191.27719322435104", "0.025230958527596624"),
            ("644", "5", "None", "None", "189.61341861573052", "190.19435878281627", "0.0030544552993242067"),
            ("649", "0", "None", "None", "190.00845182720153", "190.00845182720326", "9.124458720559026e-15"),
        ],
        "matrix": "1c86105edf27df1e",
        "last_pair_rows": "efea2e7bed4f822d",
        "row_sum_duals": "19a0bf79e8f0cb2c",
        "n_pair_rows": 589,
        "repair_kind": "sources",
    },
}


@pytest.fixture
def frozen_clock(monkeypatch):
    monkeypatch.setattr(time, "perf_counter", lambda: 1000.0)


@pytest.mark.parametrize("name", sorted(CASES))
def test_certificates_are_pinned(name, frozen_clock):
    city, k, m, method, kwargs = CASES[name]
    got = _run(city, k, m, method, **dict(kwargs))
    assert got == EXPECTED[name]
