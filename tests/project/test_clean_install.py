"""README's first command on a newcomer's machine: the runtime lock alone, in a fresh virtual environment.

The tests themselves run in the dev lock's environment, a superset of the runtime's: a package only the test
tools bring in would hide a missing declaration there (cryptography once hid one in the machine's own Python).
So this module builds a second, fresh venv from ``requirements.lock`` alone (no system site-packages; pip's own
wheel cache keeps it to about a minute), then

* starts ``streamlit run app`` from it, as the README does, and waits in Chromium for the Lesson's first screen
  to show its numbers (no error box, no traceback in the page or the server's log);
* installs the project into it as a package (``pip install ".[app]"``: nothing beyond the lock is needed) and
  runs the ``panda`` command from outside the checkout: ``--help`` lists every subcommand, an embedded city
  loads from the wheel's data, and ``prepare`` says where to run it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_support import free_port, start, stop, wait_healthy
from test_dependencies import entries

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
#: Generous: a cold first screen starts the Dask cluster and compiles nothing (the Lesson's default view).
FIRST_SCREEN_LIMIT_S = 240
#: Variables of this (dev) environment that would let it leak into the fresh one.
_LEAKY = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONNOUSERSITE")


def _clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """This process's environment with the fresh venv first on PATH and nothing of the dev venv left."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    dev_bin = str(Path(sys.executable).parent)
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != dev_bin]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    return {**env, **extra}


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory) -> Path:
    """A venv made by ``python -m venv`` (no system site-packages) holding exactly the hashed runtime lock."""
    venv = tmp_path_factory.mktemp("clean-install") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)  # the interpreter behind the dev venv
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = _clean_env(venv)
    install = _run(
        [
            python,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--require-hashes",
            "--no-deps",
            "-r",
            str(ROOT / "requirements.lock"),
        ],
        env,
        ROOT,
        900,
    )
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-4000:]
    check = _run([python, "-m", "pip", "check"], env, ROOT, 120)
    assert check.returncode == 0, f"the runtime lock misses a dependency:\n{check.stdout}{check.stderr}"
    return venv


def test_the_fresh_venv_holds_the_runtime_lock_and_nothing_else(runtime_venv):
    python = str(runtime_venv / "bin" / "python")
    probe = _run(
        [python, "-c", "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.path]))"],
        _clean_env(runtime_venv),
        Path("/"),
        60,
    )
    import json

    prefix, base_prefix, path = json.loads(probe.stdout)
    assert prefix == str(runtime_venv) and base_prefix != prefix
    outside = [p for p in path if "site-packages" in p and not p.startswith(str(runtime_venv))]
    assert not outside, f"site-packages from outside the venv: {outside}"
    freeze = _run([python, "-m", "pip", "freeze", "--all"], _clean_env(runtime_venv), Path("/"), 120)
    installed = {
        re.split(r"[=@ ]", line, maxsplit=1)[0].lower().replace("_", "-") for line in freeze.stdout.splitlines()
    }
    locked = set(entries(ROOT / "requirements.lock"))
    assert locked <= installed, sorted(locked - installed)
    # What venv itself brings (pip, setuptools) and nothing else beyond the lock.
    assert installed - locked <= {"pip", "setuptools", "wheel"}, sorted(installed - locked)


def test_readme_first_command_shows_the_lessons_numbers(runtime_venv, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    port = free_port()
    log_name = "clean-install-streamlit.log"
    # README: `streamlit run app` (the console script of the fresh venv), headless on a loopback port, with a
    # class database of this test's own instead of data/class.db.
    cmd = [
        str(runtime_venv / "bin" / "streamlit"),
        "run",
        "app",
        "--server.headless=true",
        "--server.address=127.0.0.1",
        f"--server.port={port}",
        "--browser.gatherUsageStats=false",
    ]
    env = _clean_env(runtime_venv, PYTHONUNBUFFERED="1", PANDA_DB_URL=f"sqlite:///{tmp_path / 'class.db'}")
    proc = start(cmd, log_name, env)
    log = ROOT / "test-artifacts" / log_name
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc, timeout_s=120)
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            t0 = time.monotonic()
            page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
            shown, body = 0, ""
            while time.monotonic() - t0 < FIRST_SCREEN_LIMIT_S:
                body = page.inner_text("body")
                assert "encountered an error" not in body and "Traceback" not in body, body[:2000]
                assert not page.locator('[data-testid="stException"]').count(), body[:2000]
                values = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
                shown = sum(bool(re.search(r"\d", v)) for v in values)
                if shown >= 2:
                    break
                page.wait_for_timeout(500)
            page.screenshot(path=str(ROOT / "test-artifacts" / "clean-install-first-screen.png"))
            browser.close()
        assert shown >= 2, f"no numbers within {FIRST_SCREEN_LIMIT_S} s: {body[:1500]}"
        print(f"clean venv: the Lesson's numbers after {time.monotonic() - t0:.1f} s")
    finally:
        stop(proc)
    server_log = log.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in server_log, server_log[-4000:]


def test_installed_package_has_a_working_panda_command(runtime_venv, tmp_path):
    """``pip install ".[app]"`` over the lock installs nothing more, and ``panda`` works away from the checkout."""
    python = str(runtime_venv / "bin" / "python")
    env = _clean_env(runtime_venv, XDG_CACHE_HOME=str(tmp_path / "cache"))
    before = _run([python, "-m", "pip", "freeze", "--all"], env, ROOT, 120).stdout
    install = _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", ".[app]"], env, ROOT, 600)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-4000:]
    after = _run([python, "-m", "pip", "freeze", "--all"], env, ROOT, 120).stdout
    added = set(after.splitlines()) - set(before.splitlines())
    assert [re.split(r"[ =@]", line, maxsplit=1)[0] for line in added] == ["panda-explorer"], added
    assert _run([python, "-m", "pip", "check"], env, ROOT, 120).returncode == 0

    panda = str(runtime_venv / "bin" / "panda")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    helped = _run([panda, "--help"], env, elsewhere, 120)
    assert helped.returncode == 0, helped.stderr
    listed = set(re.findall(r"^    (\w+)", helped.stdout, re.M))
    assert listed == {"network", "run", "compare", "plan", "experiment", "prepare"}, helped.stdout
    for command in sorted(listed):
        sub = _run([panda, command, "--help"], env, elsewhere, 120)
        assert sub.returncode == 0 and "usage: panda " + command in sub.stdout, (command, sub.stdout, sub.stderr)

    # The embedded city comes from the wheel (panda/data), and its parsed copy goes to the user's cache.
    city = _run([panda, "network", "--city", "kotka", "--json"], env, elsewhere, 300)
    assert city.returncode == 0, city.stderr
    import json

    summary = json.loads(city.stdout)
    assert summary["n_nodes"] == 224 and "site-packages" in summary["source"], summary
    assert list((tmp_path / "cache" / "panda-explorer" / "cities").glob("kotka-*.npz"))

    # prepare needs the dashboard: away from the project's folder it says so, in one sentence and no traceback.
    away = _run([panda, "prepare", "--link", "http://127.0.0.1:8501/?city=kotka"], env, elsewhere, 120)
    assert away.returncode == 1 and "run it in the project's folder" in away.stderr, away.stderr
    assert "Traceback" not in away.stderr
    # In the project's folder the same installed command finds the dashboard, and gets as far as the links file.
    here = _run([panda, "prepare", str(tmp_path / "no-such-links.txt")], env, ROOT, 300)
    assert here.returncode == 1, here.stderr
    assert "cannot read" in here.stderr and "Traceback" not in here.stderr, here.stderr
