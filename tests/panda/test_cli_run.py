"""`python -m panda run`: the summary on stdout, JSON on disk, clear errors for bad flags."""

from __future__ import annotations

import io
import json

import pytest

from panda.cli import build_parser, cmd_run, main


def test_run_writes_summary_and_json(tmp_path):
    path = tmp_path / "out.json"
    args = build_parser().parse_args(
        [
            "run",
            "--city",
            "kotka",
            "--records",
            "60",
            "--users",
            "8",
            "--outputs",
            "20",
            "--preset",
            "artifact",
            "--seed",
            "1",
            "--json",
            str(path),
        ]
    )
    buf = io.StringIO()
    assert cmd_run(args, out=buf) == 0
    text = buf.getvalue()
    assert "utility loss" in text and " m" in text and "user pairs violating" in text
    data = json.loads(path.read_text())
    assert data["instance"]["n_records"] == 60
    assert data["lp_status"] == "Optimal"
    assert data["n_anchor_union"] > 0
    assert 0.0 <= data["user_pair_violation_rate"] <= 1.0
    assert set(data["timings_s"]) >= {"anpo_lp", "margins", "total"}
    assert len(data["users"]["records"]) == 8


def test_run_bad_flags_exit_2_without_traceback(capsys):
    assert main(["run", "--city", "kotka", "--records", "10", "--outputs", "100"]) == 2
    err = capsys.readouterr().err
    assert "n_outputs" in err and "Traceback" not in err
    assert main(["run", "--city", "kotka", "--radius", "abc"]) == 2
    assert "--radius" in capsys.readouterr().err
    assert main(["run", "--city", "kotka", "--records", "60", "--outputs", "20", "--alpha", "1.5"]) == 2
    assert "alpha" in capsys.readouterr().err
    assert main(["run", "--city", "atlantis"]) == 2


def test_compare_reports_under_the_chosen_loss(tmp_path):
    from panda.cli import cmd_compare
    from panda.instance import make_instance
    from panda.mechanisms import build_em
    from panda.network import load_city

    path = tmp_path / "cmp.json"
    argv = ["compare", "--city", "kotka", "--records", "40", "--users", "5", "--outputs", "10", "--seed", "2"]
    argv += ["--methods", "em", "--loss", "straight", "--json", str(path)]
    buf = io.StringIO()
    assert cmd_compare(build_parser().parse_args(argv), out=buf) == 0
    assert "loss: straight-line distance from the place to its report" in buf.getvalue()
    data = json.loads(path.read_text())
    assert data["instance"]["loss"] == "straight"
    # The reported loss is EM's expected straight-line distance on the same instance, computed here again.
    inst = make_instance(load_city("kotka"), n_records=40, n_users=5, n_outputs=10, seed=2, loss="straight")
    mech = build_em(inst, 5.0)
    expected = float((inst.prior[:, None] * inst.cost_m * mech.matrix).sum())
    (row,) = data["rows"]
    assert row["utility_loss_m"] == pytest.approx(expected, rel=1e-9)
