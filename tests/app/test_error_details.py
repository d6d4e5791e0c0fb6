"""A person never sees a traceback or a server path: the project's Streamlit config redacts uncaught errors
(issue 29, item 7; client.showErrorDetails in .streamlit/config.toml)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT
from streamlit import config
from streamlit.testing.v1 import AppTest

CONFIG_FILE = ROOT / ".streamlit" / "config.toml"
#: Streamlit's sentence for a redacted error (streamlit/elements/exception.py).
GENERIC = "This app has encountered an error. The original error message is redacted"


@pytest.fixture
def project_config(monkeypatch):
    """Streamlit's options as `streamlit run app` reads them from the project's folder (no environment override)."""
    monkeypatch.delenv("STREAMLIT_CLIENT_SHOW_ERROR_DETAILS", raising=False)
    monkeypatch.chdir(ROOT)
    try:
        yield config.get_config_options(force_reparse=True)
    finally:
        monkeypatch.undo()
        config.get_config_options(force_reparse=True)


def test_the_project_config_hides_error_details(project_config):
    option = project_config["client.showErrorDetails"]
    assert option.value == "none"
    assert option.where_defined == str(CONFIG_FILE)
    assert config.get_option("client.showErrorDetails") == config.ShowErrorDetailsConfigOptions.NONE


def test_an_uncaught_error_shows_neither_its_type_nor_its_message_nor_a_traceback(project_config):
    """Streamlit's own redaction, with the project's config: the page gets the generic sentence only."""
    script = f"raise ValueError('cannot open {ROOT}/data/cache/secret.graphml')"
    at = AppTest.from_string(script, default_timeout=60).run()
    (shown,) = at.exception
    assert shown.message.startswith(GENERIC), shown.message
    assert not shown.stack_trace and not shown.proto.type, (shown.stack_trace, shown.proto.type)
    everything = str(shown.proto)
    assert str(ROOT) not in everything and "ValueError" not in everything and ".py" not in everything, everything


def test_streamlit_reads_the_option_from_the_project_folder():
    """`streamlit config show` (the CLI the Dockerfile's `streamlit run app` shares its config with)."""
    env = {k: v for k, v in os.environ.items() if k != "STREAMLIT_CLIENT_SHOW_ERROR_DETAILS"}
    out = subprocess.run(
        [sys.executable, "-m", "streamlit", "config", "show"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    block = out[out.index("[client]") : out.index("[", out.index("[client]") + 1)]
    assert f'# The value below was set in {CONFIG_FILE}\nshowErrorDetails = "none"' in block, block
