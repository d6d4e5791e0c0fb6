"""Pins today's certificates of :func:`panda.optimal.solve_optimal`, bit for bit.

Small deterministic instances (Kotka: every pair within the floor radius, the dense path; Liechtenstein:
the near-list path), both round solvers (warm dual simplex and restarted PDHG), each stopped by a fixed
number of rounds (PDHG rounds end by steps). Any change of rounds, bounds or matrices fails here.

The certificates between rounds are budgeted by time (a share of the rounds' seconds), so the clock
is frozen (``time.perf_counter`` returns a constant): no time passes, every budget check passes, and
which rounds get certified no longer depends on the machine's speed.

Bits also depend on the processor: OpenBLAS picks its kernels, and numba compiles, for the CPU it runs on, and
two CPUs round differently. So each case runs in a process of its own with the arithmetic fixed
(:data:`FIXED_ARITHMETIC`: OpenBLAS's Haswell kernels on one thread, numba compiled for a generic x86-64 with a
cache of its own), on any x86-64 with AVX2. The expected values were made that way by the code at 36291cf (the
last commit before the project's layout changed): ``python tests/panda/test_optimal_pinned.py --print``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

import panda
from panda.optimal import OptimalResult, solve_optimal

EPS = 5.0
ROOT = Path(__file__).resolve().parents[2]


def tuple_back(summary: dict) -> dict:
    """A summary read back from JSON, with the tuples this file writes (bounds, rounds)."""
    return {**summary, "bounds": tuple(summary["bounds"]), "rounds": [tuple(r) for r in summary["rounds"]]}


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
        "bounds": ("100.79398873575269", "272.1193254307269", "100.78284852966935", "0.6295963596991508"),
        "rounds": [
            ("40", "80", "0", "128", "53.32768875697424", "inf", "inf"),
            ("120", "80", "4", "128", "87.79307335237861", "272.1193254307269", "0.677372883335594"),
            ("196", "80", "7", "128", "100.79398873575269", "272.1193254307269", "0.6295963596991508"),
        ],
        "matrix": "a97775d71bcb3e0f",
        "last_pair_rows": "8483f25c7cb191de",
        "row_sum_duals": "73a15140791091b9",
        "n_pair_rows": 156,
        "repair_kind": "sources",
    },
    "kotka-simplex": {
        "reason": "max rounds",
        "solved": False,
        "bounds": ("143.59781810964338", "364.3899638639353", "143.57888294667083", "0.6059226862700768"),
        "rounds": [
            ("60", "180", "None", "None", "28.625294730908493", "364.3899638639353", "0.9214432405674123"),
            ("240", "180", "None", "None", "68.37567123639049", "364.3899638639353", "0.8123557781028178"),
            ("420", "180", "None", "None", "94.15454672594159", "364.3899638639353", "0.7416104831001896"),
            ("600", "180", "None", "None", "112.3200824021575", "364.3899638639353", "0.6917585731200372"),
            ("780", "180", "None", "None", "128.66160589507206", "364.3899638639353", "0.64691232291152"),
            ("960", "180", "None", "None", "143.59781810964338", "364.3899638639353", "0.6059226862700768"),
        ],
        "matrix": "aa0b91802ace69cf",
        "last_pair_rows": "291e4eb89bbb3e01",
        "row_sum_duals": "31a58ef32ab4836a",
        "n_pair_rows": 1080,
        "repair_kind": "sources",
    },
    "kotka-simplex-exact": {
        "reason": "no violated row",
        "solved": True,
        "bounds": ("262.886731564101", "262.8867315641013", "262.88541049864466", "1.0811389856499382e-15"),
        "rounds": [
            ("465", "388", "None", "None", "114.93044381133652", "314.3095257074408", "0.634339927965423"),
            ("853", "253", "None", "None", "174.05112696529653", "313.89280691268056", "0.4455077557297626"),
            ("1106", "301", "None", "None", "206.26525161921154", "313.89280691268056", "0.34287996705642604"),
            ("1407", "233", "None", "None", "225.84833798134835", "313.89280691268056", "0.280492152073509"),
            ("1640", "157", "None", "None", "244.0919149750508", "313.89280691268056", "0.2223717472985838"),
            ("1797", "145", "None", "None", "256.2464731400264", "291.5598875373514", "0.12111890526367775"),
            ("1942", "74", "None", "None", "259.4297562593712", "279.4854846182455", "0.07175946323748733"),
            ("2016", "53", "None", "None", "261.1620856440003", "271.5548321209101", "0.03827126328682824"),
            ("2069", "37", "None", "None", "262.40536671396194", "268.1566899033707", "0.02144762150622173"),
            ("2106", "29", "None", "None", "262.8743234417134", "263.2501107618606", "0.0014274915936773856"),
            ("2135", "1", "None", "None", "262.8850275199972", "262.9019866468679", "6.450741238965137e-05"),
            ("2136", "6", "None", "None", "262.8851967024435", "262.9019866468679", "6.386389330304611e-05"),
            ("2142", "0", "None", "None", "262.886731564101", "262.8867315641013", "1.0811389856499382e-15"),
        ],
        "matrix": "5ea67ecb538a97f1",
        "last_pair_rows": "776a6bfad894433b",
        "row_sum_duals": "2948119a57fef071",
        "n_pair_rows": 2112,
        "repair_kind": "up",
    },
    "liechtenstein-pdhg": {
        "reason": "max rounds",
        "solved": False,
        "bounds": ("176.1683256769286", "195.0069492139126", "175.9188429224326", "0.09660488312300612"),
        "rounds": [
            ("60", "180", "0", "128", "143.72888259318285", "inf", "inf"),
            ("240", "180", "5", "128", "159.86302532796432", "195.7920919049016", "0.18350621941558515"),
            ("415", "106", "22", "128", "176.1683256769286", "195.0069492139126", "0.09660488312300612"),
        ],
        "matrix": "31fe5be52f7a2311",
        "last_pair_rows": "ae7d282234bd3d66",
        "row_sum_duals": "ee8a61f6bb9c33fa",
        "n_pair_rows": 355,
        "repair_kind": "sources",
    },
    "liechtenstein-simplex-drop": {
        "reason": "max rounds",
        "solved": False,
        "bounds": ("200.20353300929662", "202.13614067278965", "199.9473341717719", "0.009560920956838997"),
        "rounds": [
            ("80", "320", "None", "None", "139.15172224993935", "205.21714371332214", "0.3219293489225871"),
            ("400", "320", "None", "None", "190.09050220074448", "205.21714371332214", "0.0737104183347801"),
            ("720", "260", "None", "None", "197.91843409930055", "205.21714371332214", "0.03556578891000215"),
            ("980", "55", "285", "None", "199.84469613449315", "205.21714371332214", "0.026179331227482783"),
            ("750", "51", "None", "None", "200.20353300929662", "202.13614067278965", "0.009560920956838997"),
        ],
        "matrix": "cdbf04b75dfa9411",
        "last_pair_rows": "40ef0b4cbad96493",
        "row_sum_duals": "8381be121fa331d3",
        "n_pair_rows": 721,
        "repair_kind": "sources",
    },
    "liechtenstein-simplex-exact": {
        "reason": "no violated row",
        "solved": True,
        "bounds": ("190.00845182720153", "190.00845182720326", "189.76007256568548", "9.124458720559026e-15"),
        "rounds": [
            ("424", "180", "None", "None", "172.00041836239598", "194.2190149257737", "0.114399697536666"),
            ("604", "40", "None", "None", "186.45108629483238", "191.27719322435104", "0.025230958527596475"),
            ("644", "5", "None", "None", "189.61341861573052", "190.19435878281627", "0.0030544552993242067"),
            ("649", "0", "None", "None", "190.00845182720153", "190.00845182720326", "9.124458720559026e-15"),
        ],
        "matrix": "a7b928f435cf4dc8",
        "last_pair_rows": "ecf2c900311951b7",
        "row_sum_duals": "1d1a8be3c1484b03",
        "n_pair_rows": 589,
        "repair_kind": "sources",
    },
}


#: The environment of a pinned run: one BLAS kernel and thread, numba's generic target (and its own cache, so no
#: function compiled for this CPU is loaded).
FIXED_ARITHMETIC = {
    "OPENBLAS_CORETYPE": "Haswell",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "NUMBA_CPU_NAME": "generic",
    "NUMBA_NUM_THREADS": "2",
    # numpy picks its loops by the CPU at run time: its AVX2 ones everywhere (every x86-64 machine since 2015).
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
}


def _pinned_run(name: str, cache_dir: str) -> dict:
    """One case in a fresh process with :data:`FIXED_ARITHMETIC`, its summary as JSON values."""
    env = {**os.environ, **FIXED_ARITHMETIC, "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, __file__, name], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _frozen_run(name: str) -> dict:
    time.perf_counter = lambda: 1000.0  # this process runs one case only
    city, k, m, method, kwargs = CASES[name]
    return _run(city, k, m, method, **dict(kwargs))


@pytest.mark.parametrize("name", sorted(CASES))
def test_certificates_are_pinned(name, tmp_path_factory):
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the pins are of x86-64 arithmetic")
    got = _pinned_run(name, str(tmp_path_factory.getbasetemp() / "numba-generic"))
    assert got == json.loads(json.dumps(EXPECTED[name]))


if __name__ == "__main__":
    if sys.argv[1:] == ["--print"]:  # the expected values of every case, as this file writes them
        import pprint

        base = tempfile.mkdtemp(prefix="numba-generic-")
        pprint.pprint({n: tuple_back(_pinned_run(n, base)) for n in sorted(CASES)}, width=120, sort_dicts=False)
    else:
        print(json.dumps(_frozen_run(sys.argv[1])))
