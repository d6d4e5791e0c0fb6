"""experiments/make_report.py: the report's sections in order, paragraphs only where the run has their topic."""

from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from panda import experiments as ex

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def make_report():
    spec = importlib.util.spec_from_file_location("make_report", ROOT / "experiments" / "make_report.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_report"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("make_report", None)


def _row(method: str, k: int, rep: int, **values) -> dict:
    row = dict.fromkeys(ex.ROW_COLUMNS, "")
    row.update(
        network="rome-paper",
        K=k,
        preset="artifact" if method.startswith("panda") else "",
        epsilon_per_km=5.0,
        delta=1e-7 if method.startswith("panda") else "",
        method=method,
        repetition=rep,
        status="solved",
        time_s=0.5,
        time_limit_s=1800.0,
        details="{}",
    )
    row.update(values)
    return row


def _write_run(folder: Path, em_loss_m: dict[int, float]) -> Path:
    """A run of EM, EM+BR and PAnDA-e (artifact preset) at K = 500 and 1,000, two repetitions."""
    rows = []
    for k in (500, 1000):
        for rep in (0, 1):
            rows.append(_row("em", k, rep, users_loss_m=em_loss_m[k] + rep, violation_rate=0.0))
            # The paper's EM+BR loses about three quarters of its EM's loss.
            rows.append(_row("em-br", k, rep, users_loss_m=0.75 * em_loss_m[k] + rep, violation_rate=0.0))
            rows.append(
                _row(
                    "panda-e",
                    k,
                    rep,
                    users_loss_m=250.0 + rep,
                    pmdp_user_rate_over_delta=0.5,
                    anchor_union=100,
                    n_constrained_pairs=10,
                    n_over_budget_pairs=10,
                    phase1_share_median=2.0,
                    margin_share_median=0.5,
                )
            )
    folder.mkdir()
    with (folder / "rows.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, ex.ROW_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    spec = {
        "networks": ["rome-paper"],
        "epsilons_per_km": [5.0],
        "n_users": 50,
        "n_outputs": 100,
        "n_tasks": 1,
        "metric": "haversine",
        "seed": 1,
        "time_limit_s": 1800.0,
        "audit_sample_pairs": 20000,
    }
    (folder / "experiment.json").write_text(json.dumps({"spec": spec, "runs": []}), encoding="utf-8")
    return folder


def test_sections_come_in_the_table_of_contents_order(make_report, tmp_path):
    text = make_report.build_report(_write_run(tmp_path / "run", {500: 1315.0, 1000: 1322.0}), note="a note")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert [h.split(":")[0].split(" (")[0] for h in headings] == [
        "## Setup",
        "## Headline",
        "## Table 4",
        "## Table 2",
        "## Privacy audits",
        "## PAnDA",
        "## Reading the gaps",
        "## What was not run, and why",
        "## Reproduce",
    ]  # no optimal-LP section: the run has no LP
    assert "- a note\n" in text
    assert text.endswith("rows.csv` every row (timings per phase, LP sizes, seeds).\n")


def test_a_paragraph_is_left_out_when_the_run_lacks_its_topic(make_report, tmp_path):
    folder = _write_run(tmp_path / "run", {500: 1315.0, 1000: 1322.0})
    t = make_report._report_tables(ex.read_rows(folder), json.loads((folder / "experiment.json").read_text()))
    assert t.ks == [500, 1000] and t.reps == [0, 1] and t.presets == ("artifact",)
    assert t.loss_m_paper == {}  # baselines alone do not make a paper preset
    for absent in (
        make_report._lpca_paragraph,
        make_report._paper_preset_paragraph,
        make_report._optimal_lp_paragraph,
        make_report._coincide_paragraph,
    ):
        assert absent(t) is None, absent.__name__
    assert make_report._lp_relaxation_paragraph(t, "lp-bd") is None
    for present in (make_report._em_paragraph, make_report._artifact_paragraph, make_report._spread_paragraph):
        assert isinstance(present(t), str), present.__name__


def test_the_em_verdict_follows_the_numbers(make_report, tmp_path):
    def em_paragraph(name, em_loss_m):
        folder = _write_run(tmp_path / name, em_loss_m)
        meta = json.loads((folder / "experiment.json").read_text())
        return make_report._em_paragraph(make_report._report_tables(ex.read_rows(folder), meta))

    paper = {k: make_report._paper_mean(make_report.PAPER_TABLE4_ROME_M["em"][i]) for i, k in enumerate((500, 1000))}
    assert em_paragraph("near", paper).startswith("**EM and EM+BR: close to the paper's loss.**")
    assert em_paragraph("far", {k: 3 * v for k, v in paper.items()}).startswith(
        "**EM and EM+BR: above the paper's loss.**"
    )
