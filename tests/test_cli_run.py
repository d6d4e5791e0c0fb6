"""`python -m panda run`: the summary on stdout, JSON on disk, clear errors for bad flags."""

from __future__ import annotations

import io
import json

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
