"""Scale-out on loopback: the dashboard's jobs run on a separate Dask scheduler and its workers, over TLS.

Makes a certificate authority and a certificate with README's openssl commands, starts ``dask scheduler``
and two ``dask worker`` processes with them (from the project root, ``PYTHONPATH`` set, as on the
machines of a class), then ``streamlit run app`` with ``PANDA_DASK_SCHEDULER=tls://...`` and the
certificate in Dask's own configuration variables, and renders the Lesson page and the PAnDA page in a
real Chromium. The scheduler's event log proves the jobs ran on those two workers, and the server
started no workers of its own. Everything is stopped at teardown.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from server_support import ARTIFACTS, ROOT, free_port, stop, streamlit_server

try:  # the browser test's fixture and helper (the TLS test below runs without a browser too)
    from browser_support import _wait_idle, browser  # noqa: F401
except pytest.skip.Exception as no_browser:  # no Chromium or playwright: only the browser test is skipped
    _NO_BROWSER = str(no_browser)

    @pytest.fixture(scope="module")
    def browser():
        pytest.skip(_NO_BROWSER)


pytest.importorskip("distributed")
psutil = pytest.importorskip("psutil")

from panda.execution import EVENT_TOPIC, MESSAGE_LOG_ENV, MESSAGE_LOG_LENGTH, TLS_CONFIG_ENV  # noqa: E402


def _readme_openssl_commands() -> str:
    """README "Serving a class": the commands that make a certificate authority and one certificate signed
    by it for the scheduler, the workers and the web server (run in the certificates' folder)."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("mkdir -m 700 panda-tls && cd panda-tls\n") + len("mkdir -m 700 panda-tls && cd panda-tls\n")
    commands = readme[start : readme.index("```", start)]
    assert commands.count("openssl ") == 3, commands
    return commands


LOOPBACK = {"127.0.0.1", "::1"}


def _family(procs: list[subprocess.Popen]) -> list[psutil.Process]:
    """The processes and all their children (while they run)."""
    found = []
    for proc in procs:
        try:
            parent = psutil.Process(proc.pid)
            found += [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """README's certificates, made with its openssl commands in a private folder: {"ca", "cert", "key"} paths."""
    folder = tmp_path_factory.mktemp("dask-tls")
    folder.chmod(0o700)
    done = subprocess.run(["sh", "-e", "-c", _readme_openssl_commands()], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return {"ca": str(folder / "ca.pem"), "cert": str(folder / "dask.pem"), "key": str(folder / "dask.key")}


def _security(certificates):
    from distributed import Security

    return Security(
        tls_ca_file=certificates["ca"],
        tls_client_cert=certificates["cert"],
        tls_client_key=certificates["key"],
        require_encryption=True,
    )


def _tls_env(certificates) -> dict[str, str]:
    """Dask's configuration of a client's certificates, as the web server gets it."""
    return dict(zip(TLS_CONFIG_ENV, (certificates["ca"], certificates["cert"], certificates["key"]), strict=True))


@pytest.fixture(scope="module")
def cluster(certificates):
    """``dask scheduler`` + two one-thread ``dask worker`` processes on loopback, over TLS.

    Yields the scheduler's address, the workers' addresses by name, and the processes.
    """
    from distributed import Client

    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    address = f"tls://127.0.0.1:{port}"
    tls = ["--tls-ca-file", certificates["ca"], "--tls-cert", certificates["cert"], "--tls-key", certificates["key"]]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }
    env.pop("PANDA_DASK_SCHEDULER", None)
    log = open(ARTIFACTS / "scale-out-cluster.log", "wb")  # noqa: SIM115 (closed in the finally)
    dask_cli = [sys.executable, "-m", "dask"]
    # as README "Serving a class" starts them (on loopback, and the HTTP routes on loopback too)
    scheduler = [*dask_cli, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", str(port), *tls]
    scheduler += ["--no-dashboard", "--dashboard-address", "127.0.0.1:0"]
    procs = [
        subprocess.Popen(
            scheduler,
            cwd=ROOT,
            env={**env, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1", MESSAGE_LOG_ENV: str(MESSAGE_LOG_LENGTH)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    ]
    worker = [*dask_cli, "worker", address, *tls, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"]
    worker += ["--dashboard-address", "127.0.0.1:0", "--host", "127.0.0.1", "--preload", "panda.execution"]
    for name, extra in (("class-a", []), ("class-b", ["--resources", "long=1"])):
        procs.append(
            subprocess.Popen([*worker, "--name", name, *extra], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        )
    try:
        with Client(address, timeout=60, set_as_default=False, security=_security(certificates)) as client:
            client.wait_for_workers(2, timeout=120)
            names = {w["name"]: a for a, w in client.scheduler_info(n_workers=-1)["workers"].items()}
        assert set(names) == {"class-a", "class-b"}
        yield address, names, procs
    finally:
        everything = _family(procs)
        for proc in reversed(procs):  # the workers first, then the scheduler
            stop(proc)
        log.close()
        deadline = time.monotonic() + 15
        while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in everything):
            if time.monotonic() > deadline:
                raise AssertionError("cluster processes left behind")
            time.sleep(0.2)


PROBE = """
import os
from panda.execution import Executor, JobError
ex = Executor(os.environ["PANDA_DASK_SCHEDULER"], connect_timeout_s=20)
try:
    print("worker pid", ex.run(os.getpid, timeout_s=60))
except JobError as exc:
    print("JobError:", exc)
finally:
    ex.close()
"""


def test_the_tls_cluster_serves_executors_with_the_certificate_only(cluster, certificates):
    """A server with the certificate in Dask's configuration runs jobs there; without it, a plain error;
    a client with another certificate is refused. Every listener of the cluster is on loopback."""
    from distributed import Client, Security

    address, names, procs = cluster
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PANDA_DASK_SCHEDULER": address}
    for name in TLS_CONFIG_ENV:
        env.pop(name, None)
    probe = [sys.executable, "-c", PROBE]
    done = subprocess.run(probe, cwd=ROOT, env={**env, **_tls_env(certificates)}, capture_output=True, text=True)
    worker_pids = {p.pid for p in _family(procs[1:])}
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("worker pid ") and int(done.stdout.split()[-1]) in worker_pids, done.stdout
    done = subprocess.run(probe, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == (
        f"JobError: the computing cluster at {address} needs TLS certificates: set "
        + ", ".join(TLS_CONFIG_ENV)
        + ' (README "Serving a class")'
    ), done.stdout + done.stderr
    with pytest.raises(Exception, match="TLS|certificate|closed|Timed out"):
        with Client(address, timeout=5, set_as_default=False, security=Security.temporary()) as client:
            client.scheduler_info()
    listening = [
        (proc.pid, conn.laddr)
        for proc in _family(procs)
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    # the scheduler and its HTTP routes; per worker: its nanny, its comm and its HTTP routes
    assert len(listening) == 2 + 2 * 3 and all(addr.ip in LOOPBACK for _, addr in listening), listening


@pytest.fixture(scope="module")
def class_server(cluster, certificates, tmp_path_factory):
    """``PANDA_DASK_SCHEDULER=... streamlit run app`` on a free loopback port; stopped at teardown.

    Its own, empty result store: what earlier tests computed must not spare the cluster its jobs.
    """
    address, _, _ = cluster
    db = f"sqlite:///{tmp_path_factory.mktemp('scale-out-db') / 'class.db'}"
    env = {"PANDA_DASK_SCHEDULER": address, "PANDA_DB_URL": db}
    env.update(_tls_env(certificates))  # Dask's own configuration: the server's client shows the certificate
    with streamlit_server("scale-out-streamlit.log", env) as server:
        yield server.url, server.proc


def _metric_text(page, label: str) -> str:
    box = page.locator('[data-testid="stMetric"]').filter(has=page.get_by_text(label, exact=True))
    return box.locator('[data-testid="stMetricValue"]').inner_text()


@pytest.mark.browser
def test_the_dashboard_runs_its_jobs_on_the_named_cluster(browser, cluster, certificates, class_server):  # noqa: F811
    from distributed import Client

    address, names, _ = cluster
    url, server_proc = class_server
    # The jobs' start events, as they happen (the scheduler keeps only the last few of a topic).
    events: list[dict] = []
    watcher = Client(address, timeout=60, set_as_default=False, security=_security(certificates))
    watcher.subscribe_topic(EVENT_TOPIC, lambda event: events.append(event[1]))
    context = browser.new_context(viewport={"width": 1600, "height": 2200})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        t0 = time.perf_counter()
        page.goto(url, wait_until="domcontentloaded")  # the Lesson page
        page.get_by_text("Error at A", exact=True).wait_for(timeout=180_000)
        _wait_idle(page, timeout_s=120)
        lesson_s = time.perf_counter() - t0
        assert _metric_text(page, "Error at A").strip()
        page.screenshot(path=str(ARTIFACTS / "scale-out-lesson.png"))

        t0 = time.perf_counter()
        page.goto(f"{url}/explore", wait_until="domcontentloaded")  # PAnDA runs go to the workers
        page.get_by_text("LP status", exact=True).wait_for(timeout=180_000)
        _wait_idle(page, timeout_s=120)
        explore_s = time.perf_counter() - t0
        assert _metric_text(page, "LP status").strip()
        body = page.inner_text("body")
        assert "Traceback" not in body and not errors, errors
        page.screenshot(path=str(ARTIFACTS / "scale-out-explore.png"))
    finally:
        context.close()
        watcher.close()
    print(f"\n[scale-out] Lesson ready in {lesson_s:.1f} s, PAnDA page in {explore_s:.1f} s, workers {sorted(names)}")

    # The jobs started on the two named workers (the executor's start events) ...
    starts = [msg for msg in events if isinstance(msg, dict) and msg.get("event") == "start"]
    kinds = {msg["key"].split("-")[0] for msg in starts}
    # (the Lesson's mechanism comes with its numbers in one job, baseline_numbers)
    assert "run_panda_job" in kinds and kinds & {"baseline_job", "baseline_numbers_job"}, kinds
    assert {msg["worker"] for msg in starts} <= set(names.values())
    # ... and the server started no worker processes of its own.
    children = psutil.Process(server_proc.pid).children(recursive=True)
    assert not [p for p in children if "dask_worker" in " ".join(p.cmdline()) or "worker" in p.name()]
