"""The planner walked in a real Chromium as a stakeholder would (issue 40): a tolerable error typed in, the answer
read, the brief downloaded as PDF and the places as GeoPackage; the files' numbers are the page's (the PDF holds the
page's answer word for word; the GeoPackage's per-place errors average, over the prior, to the answer's).

The PDF is read with poppler's pdftotext (and its pages drawn with pdftoppm into test-artifacts/), the GeoPackage
with geopandas. Small view (K = 200) for speed; the answer itself is checked against panda.plan in
tests/app/test_plan_page.py.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import geopandas as gpd
import numpy as np
import pytest
from browser_support import ARTIFACTS, _wait_idle, _wait_map_drawn, browser, server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.browser

LINK = "K=200&N=12&M=50&perday=96"


def test_a_tolerable_error_gives_an_answer_a_pdf_brief_and_a_geopackage(server, browser, tmp_path):  # noqa: F811
    assert shutil.which("pdftotext") and shutil.which("pdftoppm"), "poppler-utils (.ci/run installs it)"
    context = browser.new_context(viewport={"width": 1280, "height": 720}, accept_downloads=True)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(f"{server}/plan?{LINK}", wait_until="domcontentloaded")
        page.get_by_text("the most protective choice", exact=False).wait_for(timeout=180_000)
        box = page.get_by_role("spinbutton", name="Tolerable expected error (m)")
        box.fill("450")
        box.press("Enter")
        page.get_by_text("within 450 m", exact=False).first.wait_for(timeout=180_000)
        _wait_idle(page, timeout_s=120)
        _wait_map_drawn(page, timeout_s=60)
        answer = page.locator("h4").first.inner_text()
        assert "within 450 m" in answer and "96 reports a day" in answer, answer
        chosen = re.search(r"here is (.+?) at ε = ([0-9.]+)/km", answer)
        assert chosen, answer
        name, eps = chosen.group(1), chosen.group(2)
        page.screenshot(path=str(ARTIFACTS / "plan-answer-1280.png"))
        assert "target=450" in page.url and "perday=96" in page.url

        with page.expect_download(timeout=120_000) as got:
            page.get_by_role("button", name="Brief (PDF)").click()
        pdf = tmp_path / "brief.pdf"
        got.value.save_as(pdf)
        assert pdf.read_bytes()[:5] == b"%PDF-"
        text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True)
        flat = " ".join(text.stdout.split())
        assert " ".join(answer.split()) in flat  # the page's answer, word for word
        assert f"{name} at ε = {eps}/km" in flat and "passed: ε-mDP holds for every pair of places" in flat
        assert "Reopen it" in flat and "target=450" in flat.replace(" ", "")
        subprocess.run(["pdftoppm", "-r", "70", "-png", str(pdf), str(ARTIFACTS / "plan-brief-page")], check=True)

        with page.expect_download(timeout=120_000) as got:
            page.get_by_role("button", name="Places (GeoPackage)").click()
        gpkg = tmp_path / "places.gpkg"
        got.value.save_as(gpkg)
        places = gpd.read_file(gpkg, layer="places")
        assert places.crs.to_epsg() == 4326 and len(places) == 200
        method = {"Planar Laplace": "laplace", "Exponential (EM)": "em"}[name]
        # The file's per-place numbers average (over the prior) to the page's answer.
        report = float(np.dot(places["prior"], places[f"{method}_report_error_m"]))
        attacker = float(np.dot(places["prior"], places[f"{method}_attacker_error_m"]))
        assert f"{report:,.0f} m from the true place" in answer and f"{attacker:,.0f} m from it" in answer
        assert errors == []
    finally:
        context.close()
