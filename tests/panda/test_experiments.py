"""Experiment sweeps: rows and columns, resume, executors (local, serial, dask), time limits, tables, CLI."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import threading
import time
import types

import pytest

from panda import experiments as ex
from panda.cli import main
from panda.experiments import measure

#: A small sweep: kotka (224 nodes), two K values, three methods, two repetitions.
SMALL = {
    "networks": ["kotka"],
    "k_values": [40, 60],
    "methods": ["em", "em-br", "panda-e"],
    "repeats": 2,
    "n_users": 10,
    "n_outputs": 20,
    "seed": 7,
}
#: Columns that must agree between executors for the same seeds (everything but times and provenance).
SAME_NUMBERS = (
    "status",
    "utility_loss_m",
    "users_loss_m",
    "violation_rate",
    "pmdp_user_rate_over_delta",
    "epsilon_min_per_km",
    "adversary_error_m",
    "anchor_union",
    "n_constrained_pairs",
    "phase1_share_median",
    "margin_share_median",
    "phase2_share_median",
    "instance_seed",
    "method_seed",
)


def _spec(**changes) -> ex.ExperimentSpec:
    return ex.ExperimentSpec(**{**SMALL, **changes})


def _by_key(rows):
    return {ex.row_key(r): r for r in rows}


def _assert_same_numbers(a_rows, b_rows):
    a, b = _by_key(a_rows), _by_key(b_rows)
    assert a.keys() == b.keys()
    for key in a:
        for col in SAME_NUMBERS:
            x, y = a[key][col], b[key][col]
            if isinstance(x, float) and math.isnan(x):
                assert isinstance(y, float) and math.isnan(y), (key, col, x, y)
            elif isinstance(x, float):
                assert y == pytest.approx(x, rel=1e-9, abs=1e-12), (key, col)
            else:
                assert x == y, (key, col)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The small sweep on the default executor (a pool of 2 local processes)."""
    out = tmp_path_factory.mktemp("experiment") / "local"
    outcome = ex.run_experiment(_spec(), out, executor="local", workers=2, progress=None, figures=False)
    return out, outcome


# ---------------------------------------------------------------------------------------------
# rows, columns, metadata
# ---------------------------------------------------------------------------------------------


def test_local_run_writes_one_row_per_key_with_all_columns(local_run):
    out, outcome = local_run
    assert outcome.n_rows_total == outcome.n_rows_written == 2 * 2 * 3
    assert outcome.n_rows_skipped == 0 and outcome.n_units_run == 4 and not outcome.failed_units
    with (out / "rows.csv").open(newline="") as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == ex.ROW_COLUMNS
    for col in (
        "utility_loss_m",
        "users_loss_m",
        "violation_rate",
        "pmdp_user_rate_over_delta",
        "epsilon_min_per_km",
        "adversary_error_m",
        "time_s",
        "status",
        "anchor_union",
        "phase1_share_median",
        "margin_share_median",
        "phase2_share_median",
    ):
        assert col in header
    rows = ex.read_rows(out)
    keys = {(r["K"], r["method"], r["repetition"]) for r in rows}
    assert keys == {(k, m, rep) for k in (40, 60) for m in ("em", "em-br", "panda-e") for rep in (0, 1)}
    assert len({ex.row_key(r) for r in rows}) == len(rows)
    for r in rows:
        assert r["network"] == "kotka" and r["epsilon_per_km"] == 5.0
        assert r["status"] == "solved", r["status"]
        assert r["time_s"] >= 0 and r["limit_enforced"] is True
        assert r["users_loss_m"] > 0 and r["utility_loss_m"] > 0
        assert r["n_users"] == 10 and r["n_outputs"] == 20
        if r["method"] == "panda-e":
            assert r["preset"] == "artifact" and r["delta"] == 1e-7
            assert r["anchor_union"] >= 1
            assert 0 <= r["pmdp_user_rate_over_delta"] <= 1
        else:  # baselines read no PandaConfig: no preset, no delta
            assert r["preset"] == "" and r["delta"] == ""
            assert r["violation_rate"] == 0.0  # EM and EM+BR are exactly eps-mDP
            assert math.isnan(r["anchor_union"])


def test_panda_rows_carry_the_relaxed_bound_and_its_ratio(local_run):
    """PAnDA's own lower bound (the relaxed AnPO LP) is measured in a sweep, as the reproduction report needs.

    Regression: build_panda once turned the relaxed LP off for every caller, so the rows had no ratio.
    """
    out, _ = local_run
    rows = [r for r in ex.read_rows(out) if r["method"] == "panda-e" and r["status"] == "solved"]
    assert rows
    for r in rows:
        assert math.isfinite(r["relaxed_lower_bound_m"]) and r["relaxed_lower_bound_m"] > 0
        assert r["approximation_ratio"] == pytest.approx(r["lp_objective_m"] / r["relaxed_lower_bound_m"])
        assert r["approximation_ratio"] >= 1 - 1e-7  # the relaxed LP has more freedom than AnPO
        assert r["time_relaxed_lp_s"] > 0  # measured, and kept out of the mechanism's time_s


def test_methods_of_one_repetition_share_the_instance(local_run):
    out, _ = local_run
    rows = ex.read_rows(out)
    for k in (40, 60):
        for rep in (0, 1):
            seeds = {(r["instance_seed"], r["method_seed"]) for r in rows if r["K"] == k and r["repetition"] == rep}
            assert seeds == {ex.unit_seeds(7, "kotka", k, rep)}
    assert ex.unit_seeds(7, "kotka", 40, 0) != ex.unit_seeds(7, "kotka", 40, 1)
    assert ex.unit_seeds(7, "kotka", 40, 0) != ex.unit_seeds(8, "kotka", 40, 0)


def test_metadata_has_configuration_seeds_versions_and_hash(local_run):
    out, _ = local_run
    meta = json.loads((out / "experiment.json").read_text())
    spec = _spec()
    assert meta["config_hash"] == spec.config_hash() and len(meta["config_hash"]) == 16
    assert meta["spec"]["k_values"] == [40, 60] and meta["spec"]["seed"] == 7
    assert {(u["K"], u["repetition"], u["instance_seed"]) for u in meta["units"]} == {
        (k, rep, ex.unit_seeds(7, "kotka", k, rep)[0]) for k in (40, 60) for rep in (0, 1)
    }
    assert meta["packages"]["numpy"] and meta["packages"]["highspy"]
    assert meta["runs"][-1]["status"] == "finished" and meta["runs"][-1]["rows_written"] == 12
    assert (out / "tables.md").read_text().count("±") > 0


# ---------------------------------------------------------------------------------------------
# resume
# ---------------------------------------------------------------------------------------------


def test_rerun_into_the_same_folder_adds_nothing_and_computes_nothing(local_run):
    out, _ = local_run
    before = (out / "rows.csv").read_bytes()
    outcome = ex.run_experiment(_spec(), out, executor="local", progress=None, figures=False)
    assert outcome.n_rows_written == 0 and outcome.n_units_run == 0
    assert outcome.n_rows_skipped == outcome.n_rows_total == 12
    assert outcome.wall_time_s < 5.0  # no instance built, no worker started
    assert (out / "rows.csv").read_bytes() == before


def test_local_workers_share_the_cores_and_serial_runs_use_them_all(local_run, tmp_path):
    """2 local workers: each method may use cores // 2 (threads and PDHG's compiled steps); the rows say so.

    Without the share, both workers' PDHG ran on 2 threads each on 2 cores: Rome K = 2,000 took 149-206 s
    in the reproduction, and 26-33 s with one core each.
    """
    from panda import threads

    out, _ = local_run
    share = max(1, threads.cores() // 2)
    assert {json.loads(r["details"]).get("cores") for r in ex.read_rows(out)} == {min(threads.THREADS, share)}
    runs = json.loads((out / "experiment.json").read_text())["runs"]
    assert [(r["workers"], r["cores_per_worker"]) for r in runs if r["units_run"]] == [(2, share)]
    serial = ex.run_experiment(_spec(k_values=[30], repeats=1), tmp_path / "serial", executor="serial", progress=None,
                               figures=False)  # fmt: skip
    assert serial.n_rows_written > 0
    assert {json.loads(r["details"]).get("cores") for r in ex.read_rows(tmp_path / "serial")} == {threads.THREADS}


def test_use_cores_limits_the_threads_and_the_compiled_steps(monkeypatch):
    from panda import _pdhg_blocks, threads

    monkeypatch.setattr(threads, "THREADS", 2)
    monkeypatch.setattr(_pdhg_blocks, "thread_policy", None)
    monkeypatch.setattr(measure, "_CORE_SHARE", None)
    measure.use_cores(1)
    assert threads.THREADS == 1 and _pdhg_blocks.thread_policy() == 1 and measure._CORE_SHARE == 1
    seen = threads.thread_map(lambda _: threading.current_thread().name, range(4))
    assert set(seen) == {threading.current_thread().name}  # one core: in the calling thread


def test_interrupted_sweep_resumes_only_the_missing_rows(local_run, tmp_path):
    out, _ = local_run
    rows = ex.read_rows(out)
    # Keep what an interrupted run could have saved: everything but K=60, repetition 1, except its EM row.
    kept = [r for r in rows if not (r["K"] == 60 and r["repetition"] == 1 and r["method"] != "em")]
    folder = tmp_path / "partial"
    folder.mkdir()
    text = io.StringIO()
    w = csv.writer(text)
    w.writerow(ex.ROW_COLUMNS)
    for r in kept:
        w.writerow([ex._format_cell(r.get(c, "")) for c in ex.ROW_COLUMNS])
    (folder / "rows.csv").write_text(text.getvalue())
    outcome = ex.run_experiment(_spec(), folder, executor="serial", progress=None, figures=False)
    assert outcome.n_rows_written == 2 and outcome.n_rows_skipped == 10 and outcome.n_units_run == 1
    _assert_same_numbers(ex.read_rows(folder), rows)


def test_other_settings_in_the_same_folder_are_refused(local_run):
    out, _ = local_run
    with pytest.raises(ValueError, match="other settings"):
        ex.run_experiment(_spec(n_users=11), out, executor="serial", progress=None)


# ---------------------------------------------------------------------------------------------
# executors
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_executor():
    """The process-wide executor of panda.execution: a local cluster of two workers, gone at teardown."""
    pytest.importorskip("distributed")
    psutil = pytest.importorskip("psutil")
    from panda.execution import close_executor, get_executor

    def worker_processes():
        return [p for p in psutil.Process().children(recursive=True) if "dask_worker" in " ".join(p.cmdline())]

    saved = {name: os.environ.pop(name, None) for name in ("PANDA_DASK_SCHEDULER", "PANDA_DASK_WORKERS")}
    os.environ["PANDA_DASK_WORKERS"] = "2"  # one interactive worker, one for long jobs (the units)
    try:
        close_executor()
        executor = get_executor()
        executor.wait_for_workers(2, timeout_s=180)
        yield executor
    finally:
        close_executor()
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        deadline = time.monotonic() + 20
        while worker_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not worker_processes(), "Dask worker processes left behind"


def test_dask_executor_gives_the_local_numbers(local_run, dask_executor, tmp_path):
    from panda.execution import get_executor

    out, _ = local_run
    outcome = ex.run_experiment(_spec(), tmp_path / "dask", executor="dask", progress=None, figures=False)
    assert outcome.n_rows_written == 12 and not outcome.failed_units
    _assert_same_numbers(ex.read_rows(tmp_path / "dask"), ex.read_rows(out))
    meta = json.loads((tmp_path / "dask" / "experiment.json").read_text())
    assert meta["runs"][-1]["executor"] == "dask"
    # a scheduler address is get_executor(address): here the same process-wide executor
    small = tmp_path / "address"
    outcome = ex.run_experiment(
        _spec(k_values=[40], repeats=1), small, executor=dask_executor.address, progress=None, figures=False
    )
    assert outcome.n_rows_written == 3 and not outcome.failed_units
    assert get_executor() is dask_executor and not dask_executor.closed
    _assert_same_numbers(ex.read_rows(small), [r for r in ex.read_rows(out) if r["K"] == 40 and r["repetition"] == 0])


def test_a_dask_unit_past_its_time_limit_is_stopped_and_recorded_failed(dask_executor, tmp_path, monkeypatch):
    from panda.experiments import runner

    monkeypatch.setattr(runner, "_unit_time_limit", lambda unit, skip: 1.0)
    spec = ex.ExperimentSpec(
        networks=["kotka"], k_values=[200], methods=["lp"], n_users=10, n_outputs=200, time_limit_s=60, seed=1
    )
    t0 = time.monotonic()
    outcome = ex.run_experiment(spec, tmp_path, executor="dask", progress=None, figures=False)
    assert time.monotonic() - t0 < 60
    assert outcome.n_rows_written == 0
    ((label, error),) = outcome.failed_units
    assert label == "kotka K=200 rep 0" and "did not finish within 1 s" in error
    assert dask_executor.restarted  # its worker was restarted


def test_dask_address_spellings():
    assert ex._dask_address("dask://10.0.0.1:8786") == "tcp://10.0.0.1:8786"
    assert ex._dask_address("tcp://10.0.0.1:8786") == "tcp://10.0.0.1:8786"
    assert ex._dask_address("local") is None
    assert ex.runner._normalise_executor(" dask ") == "dask"
    assert ex.runner._normalise_executor("dask://10.0.0.1:8786") == "tcp://10.0.0.1:8786"
    client = types.SimpleNamespace(scheduler=types.SimpleNamespace(address="tcp://10.0.0.2:8786"))
    assert ex.runner._normalise_executor(client) == "tcp://10.0.0.2:8786"  # a distributed.Client: its scheduler
    with pytest.raises(ValueError, match="executor"):
        ex.run_experiment(_spec(), "unused", executor="ray://x")


def test_a_method_over_its_time_limit_is_recorded_unsolved_with_the_time_spent(tmp_path, monkeypatch):
    # the unit runs here (serial): stop at the limit itself (patched where _run_isolated reads it)
    monkeypatch.setattr(measure, "_BUILD_GRACE_S", 0.0)
    spec = ex.ExperimentSpec(
        networks=["kotka"], k_values=[200], methods=["lp"], n_users=10, n_outputs=200, time_limit_s=0.3, seed=1
    )
    outcome = ex.run_experiment(spec, tmp_path, executor="serial", progress=None, figures=False)
    (row,) = ex.read_rows(tmp_path)
    assert outcome.n_rows_written == 1
    assert row["status"].startswith("unsolved"), row["status"]
    assert 0.3 <= row["time_s"] < 30 and row["time_limit_s"] == 0.3
    assert math.isnan(row["utility_loss_m"])
    table = ex.markdown_table(ex.read_rows(tmp_path), "time_s", network="kotka", preset="artifact", epsilon_per_km=5.0)
    assert "> 0.3" in table  # unsolved times are shown against the limit, as the paper's "> 1,800"


# ---------------------------------------------------------------------------------------------
# tables, specification, CLI
# ---------------------------------------------------------------------------------------------


def test_markdown_table_has_methods_k_columns_and_confidence_half_widths(local_run):
    out, _ = local_run
    rows = ex.read_rows(out)
    md = ex.markdown_table(rows, "users_loss_m", network="kotka", preset="artifact", epsilon_per_km=5.0, delta=1e-7)
    lines = md.splitlines()
    assert lines[0] == "| Method | K=40 | K=60 |"
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["EM", "EM+BR", "PAnDA-e"]
    assert all(line.count("±") == 2 for line in lines[2:])
    cells = ex.summarise(rows, "users_loss_m", network="kotka", preset="artifact", epsilon_per_km=5.0)
    c = cells[("em", 40)]
    vals = [r["users_loss_m"] for r in rows if r["method"] == "em" and r["K"] == 40]
    assert c.n == c.n_solved == 2 and c.mean == pytest.approx(sum(vals) / 2)
    assert c.half_width == pytest.approx(1.96 * abs(vals[0] - vals[1]) / math.sqrt(2))
    everything = ex.markdown_tables(rows)
    assert "Table 2 shape" in everything and "Table 4 shape" in everything


def test_spec_from_toml_and_its_errors(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(
        """
[experiment]
networks = ["kotka"]
K = [40, 60]
methods = ["em", "lp", "panda-e", "panda-p"]
presets = ["artifact", "paper"]
epsilon = [2.5, 5]
delta = [1e-7]
users = 10
repeats = 2
time_limit = 60
[experiment.max_K]
lp = 40
[experiment.method_presets]
"panda-p" = ["artifact"]
[experiment.overrides.paper]
lp_solver = "ipm"
[run]
out = "results/x"
"""
    )
    spec, run = ex.load_spec(path)
    assert run == {"out": "results/x"}
    assert spec.k_values == (40, 60) and spec.epsilons_per_km == (2.5, 5.0) and spec.n_users == 10
    jobs40 = {(j.method, j.preset, j.epsilon_per_km) for j in spec.jobs_for(40)}
    jobs60 = {(j.method, j.preset, j.epsilon_per_km) for j in spec.jobs_for(60)}
    assert ("lp", "", 2.5) in jobs40 and not any(m == "lp" for m, _, _ in jobs60)
    assert ("panda-e", "paper", 5.0) in jobs60 and ("panda-p", "paper", 5.0) not in jobs60
    assert spec.config_for("paper", 5.0, 1e-7).lp_solver == "ipm"
    assert len(spec.units()) == 4

    path.write_text("[experiment]\nnetworks = ['kotka']\nK = [40]\nmethods = ['em']\nusers_typo = 3\n")
    with pytest.raises(ValueError, match="users_typo"):
        ex.load_spec(path)
    with pytest.raises(ValueError, match="methods"):
        ex.ExperimentSpec(networks=["kotka"], k_values=[40], methods=["nope"])
    with pytest.raises(ValueError, match="lp_time_limit_s"):
        ex.ExperimentSpec(
            networks=["kotka"], k_values=[40], methods=["em"], preset_overrides={"paper": {"lp_time_limit_s": -1}}
        )


def test_cli_experiment_runs_resumes_and_rewrites_tables(tmp_path, capsys):
    folder = tmp_path / "cli"
    argv = [
        "experiment",
        "--networks",
        "kotka",
        "--K",
        "30",
        "--methods",
        "em,em-br",
        "--users",
        "5",
        "--outputs",
        "10",
        "--repeats",
        "1",
        "--executor",
        "serial",
        "--no-isolate",
        "--out",
        str(folder),
    ]
    assert main(argv) == 0
    assert "2 rows written" in capsys.readouterr().out
    assert main(argv) == 0
    assert "0 rows written, 2 already present" in capsys.readouterr().out
    (folder / "tables.md").unlink()
    assert main([*argv, "--tables-only"]) == 0
    assert "| EM |" in (folder / "tables.md").read_text()
    assert main(["experiment", "--networks", "kotka", "--K", "30", "--methods", "nope", "--out", str(folder)]) == 2


def test_progress_lines_estimate_the_time_left():
    keys = [("kotka", "100", "", "5.0", "", m, str(rep)) for m in ("em", "lp") for rep in (0, 1)]
    stream = io.StringIO()
    prog = ex._Progress(stream, [(k, 100) for k in keys], n_units=2)
    row = {
        "network": "kotka",
        "K": 100,
        "preset": "",
        "epsilon_per_km": 5.0,
        "delta": "",
        "method": "em",
        "repetition": 0,
        "status": "solved",
        "time_s": 0.5,
        "wall_time_s": 1.0,
    }
    prog.row(row)
    prog.row({**row, "method": "lp", "wall_time_s": 9.0})
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("[experiment] 1/4 rows, 0/2 instances") and "left" in lines[0]
    assert "kotka K=100 rep 0 lp: solved (0.50 s)" in lines[1]
    # one em (1 s) and one lp (9 s) left: about as long again as so far
    assert prog._left(10.0) == pytest.approx(10.0)
