"""The cluster commands of README "Serving a class" and docs/serving.md, run as written, on loopback.

Each document's bash block is run by bash with only what a machine here needs changed: the certificates'
folder (made with README's openssl commands), free ports for 8786 and 8787, 127.0.0.1 for the machines'
addresses, and a job in place of ``streamlit run app`` (the same environment: the scheduler's address and
the certificate in Dask's variables). Then every listener of the processes the block started must be on
loopback, and the scheduler must refuse a client without the certificate, over plain TCP or with another
certificate authority's.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from server_support import ROOT, free_port

psutil = pytest.importorskip("psutil")
pytest.importorskip("distributed")

LOOPBACK = {"127.0.0.1", "::1"}
README_CLUSTER = 'T=/etc/panda-tls; TLS="--tls-ca-file $T/ca.pem --tls-cert $T/dask.pem --tls-key $T/dask.key"'
PROBE = """
import os, sys
sys.path.insert(0, {root!r})
from panda.execution import Executor
ex = Executor(os.environ["PANDA_DASK_SCHEDULER"], connect_timeout_s=60)
try:
    print("worker pid", ex.run(os.getpid, timeout_s=120), flush=True)
finally:
    ex.close()
"""


def _bash_block(path, first_line: str) -> str:
    """The ```bash block of ``path`` whose first line is ``first_line``."""
    text = (ROOT / path).read_text()
    start = text.index(f"```bash\n{first_line}\n") + len("```bash\n")
    return text[start : text.index("```", start)]


def _readme_openssl_commands() -> str:
    block = _bash_block("README.md", "mkdir -m 700 panda-tls && cd panda-tls")
    return block.split("\n", 1)[1]  # in a folder the test made


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serving-tls")
    folder.chmod(0o700)
    done = subprocess.run(["sh", "-e", "-c", _readme_openssl_commands()], cwd=folder, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder


def _commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines kept as they are."""
    out: list[str] = []
    pending = ""
    for line in block.splitlines():
        if pending:
            pending += "\n" + line
        else:
            pending = line
        if not line.endswith("\\"):
            out.append(pending)
            pending = ""
    return out


def _on_this_machine(block: str, certs, probe_cmd: str) -> tuple[str, int]:
    """The block as bash runs it here, and the number of worker processes it starts."""
    scheduler_port, http_port = free_port(), free_port()
    script = []
    for command in _commands(block):
        if command.lstrip().startswith("# 4. The proxy"):
            break  # the proxy is tests/browser/test_proxy.py's
        command = re.sub(r"^T=\S+;", f"T={certs};", command)
        command = command.replace("/path/to/checkout", str(ROOT))
        command = command.replace("SCHEDULER_IP", "127.0.0.1").replace("WORKER_IP", "127.0.0.1")
        command = command.replace(":8786", f":{scheduler_port}").replace("--port 8786", f"--port {scheduler_port}")
        command = command.replace("127.0.0.1:8787", f"127.0.0.1:{http_port}")
        command = re.sub(r"streamlit run app[^&\n]*", probe_cmd + " ", command)
        # On separate machines the commands run in separate shells: here in the background of one.
        if re.search(r"\bdask (scheduler|worker)\b", command) and not command.rstrip().endswith("&"):
            command = command.rstrip() + " &"
        script.append(command)
    text = "\n".join(script)
    n_workers = sum(int(n) for n in re.findall(r"--nworkers (\d+)", text))
    assert "--protocol tls" in text and n_workers >= 2 and probe_cmd in text, text
    return "set -e\n" + text + "\nwait\n", n_workers


def _session(leader: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == leader:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found


def _stop_session(bash: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(bash.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            bash.poll()
            if not [p for p in _session(bash.pid) if p.status() != psutil.STATUS_ZOMBIE]:
                return
            time.sleep(0.3)


@pytest.mark.parametrize(
    ("path", "first_line", "probes"),
    [
        ("README.md", README_CLUSTER, 1),
        ("docs/serving.md", "cd /path/to/checkout", 2),
    ],
    ids=["README several machines", "serving.md one machine"],
)
def test_the_documented_cluster_listens_on_loopback_and_accepts_only_the_certificate(
    path, first_line, probes, certificates, tmp_path
):
    from distributed import Client, Security

    (tmp_path / "probe.py").write_text(PROBE.format(root=str(ROOT)))
    probe_cmd = f"{sys.executable} {tmp_path / 'probe.py'}"
    script, n_workers = _on_this_machine(_bash_block(path, first_line), certificates, probe_cmd)
    (tmp_path / "commands.sh").write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASK_", "PANDA_DASK"))}
    env.pop("PYTHONPATH", None)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    log_path = tmp_path / "commands.log"
    with open(log_path, "wb") as log:
        bash = subprocess.Popen(
            ["bash", str(tmp_path / "commands.sh")],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 240
        while log_path.read_text(errors="replace").count("worker pid") < probes:
            assert bash.poll() is None, f"the commands stopped (code {bash.returncode}):\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"no job ran:\n{log_path.read_text()}"
            time.sleep(0.5)
        address = re.search(r"PANDA_DASK_SCHEDULER=(tls://\S+)", script).group(1)
        security = Security(
            tls_ca_file=str(certificates / "ca.pem"),
            tls_client_cert=str(certificates / "dask.pem"),
            tls_client_key=str(certificates / "dask.key"),
            require_encryption=True,
        )
        with Client(address, timeout=60, set_as_default=False, security=security) as client:
            client.wait_for_workers(n_workers, timeout=180)
            assert len(client.scheduler_info(n_workers=-1)["workers"]) == n_workers

        listening = [
            (proc.pid, " ".join(proc.cmdline()[:4]), conn.laddr)
            for proc in _session(bash.pid)
            for conn in proc.net_connections(kind="inet")
            if conn.status == psutil.CONN_LISTEN
        ]
        # the scheduler and its HTTP routes; per worker: its nanny, its comm and its HTTP routes
        assert len(listening) == 2 + 3 * n_workers, listening
        assert all(addr.ip in LOOPBACK for _, _, addr in listening), listening

        plain = address.replace("tls://", "tcp://")
        with pytest.raises(OSError):
            with Client(plain, timeout=5, set_as_default=False) as client:
                client.scheduler_info()
        with pytest.raises(Exception, match="TLS|certificate|closed|Timed out|timed out"):
            with Client(address, timeout=5, set_as_default=False, security=Security.temporary()) as client:
                client.scheduler_info()
    finally:
        _stop_session(bash)
    assert not [p for p in _session(bash.pid) if p.status() != psutil.STATUS_ZOMBIE], "processes left behind"
