"""HTML to PDF through the system Chromium the image downloads use (:func:`app.model.export_files.browser_path`).

One headless Chromium per document, started for it and gone when it is printed: a brief is built on a click, rarely,
and a process of its own cannot leave state behind. The page is a file in a private temporary folder (removed
afterwards), the browser's profile another; its proxy is the discard port on loopback (no request leaves the
machine: the brief loads nothing from outside anyway) and it runs under a time limit.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from app.model.export_files import NO_NETWORK_PROXY, ExportError, browser_path

__all__ = ["PRINT_TIMEOUT_S", "html_to_pdf"]

#: Seconds Chromium may take to start and print one document.
PRINT_TIMEOUT_S = 60.0
#: The most a printed PDF may weigh (a one-page brief is a few hundred kB).
MAX_PDF_BYTES = 32 * 2**20


def html_to_pdf(page: str, *, timeout_s: float = PRINT_TIMEOUT_S) -> bytes:
    """Print ``page`` (a self-contained HTML document) to PDF (A4, no header or footer); ExportError with a sentence."""
    browser = browser_path()
    if browser is None:
        raise ExportError(
            "A PDF cannot be made on this server: it needs Chromium (apt-get install chromium, or set BROWSER_PATH). "
            "The HTML brief prints to PDF from any browser."
        )
    with tempfile.TemporaryDirectory(prefix="panda-pdf-") as folder:
        source, target = Path(folder) / "brief.html", Path(folder) / "brief.pdf"
        source.write_text(page, encoding="utf-8")
        cmd = [
            browser,
            "--headless",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-extensions",
            f"--proxy-server={NO_NETWORK_PROXY}",
            f"--user-data-dir={Path(folder) / 'profile'}",
            "--no-pdf-header-footer",
            f"--print-to-pdf={target}",
            source.as_uri(),
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # Chromium refuses to run as root inside its sandbox
            cmd.insert(1, "--no-sandbox")
        try:
            subprocess.run(cmd, timeout=timeout_s, capture_output=True, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ExportError(f"The PDF took longer than {timeout_s:.0f} s to print; try again in a moment.") from None
        except OSError as exc:
            raise ExportError(f"Chromium could not be started to print the PDF ({exc}).") from None
        if not target.is_file() or not 0 < target.stat().st_size <= MAX_PDF_BYTES:
            raise ExportError("Chromium did not print the PDF; try again in a moment, or print the HTML brief.")
        return target.read_bytes()
