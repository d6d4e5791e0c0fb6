"""The Plan page (issue 40): its sentence, table and files against panda.plan, its link, its hostile inputs.

The page runs panda.plan on the dashboard's worker; these tests plan the same instance here, in the test's process,
with the page's settings, and compare. Small views (K = 200) keep the file fast.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import math
import re
import shutil
import subprocess

import apptest_support as support
import geopandas as gpd
import numpy as np
import pyogrio
import pytest
import segno
from apptest_support import clear_caches, release_resources, run_ok  # noqa: F401 (autouse fixtures)

import panda
from app.model import plan_numbers
from app.model.export_files import ExportError
from app.model.pdf_print import html_to_pdf
from app.model.plan_brief import BriefView, brief_html
from app.model.plan_files import plan_geojson, plan_geopackage
from app.plan_jobs import PLAN_BUILD_LIMIT_S, plan_key_inputs
from panda.plan import plan
from panda.plan_record import plan_from_record, plan_record

PAGE = "app_pages/plan.py"


@pytest.fixture(scope="module")
def small(kotka):
    inst = panda.make_instance(kotka, n_records=40, n_outputs=12, n_users=4, seed=3, loss="straight")
    target = float(panda.mechanisms.BASELINES["em"](inst, 6.0).loss_m)  # computed: inside the default range
    return inst, plan(inst, target, methods=("laplace", "em"), reports_per_day=288, attacker_floor_m=0.0)


def _page_instance():
    """The instance the page plans on: the small link's view with the planner's loss (straight)."""
    from app import state
    from app.model.params import Params

    q = support.SMALL
    params = Params(n_records=int(q["K"]), n_users=int(q["N"]), n_outputs=int(q["M"]), loss="straight")
    return state.instance(*params.instance_key)


def test_the_answer_and_the_table_are_the_library_s(kotka):
    at = support.make_app(PAGE, target="450", perday="12")
    run_ok(at)
    inst = _page_instance()
    truth = plan(inst, 450.0, methods=("laplace", "em"), reports_per_day=12, time_limit_s=PLAN_BUILD_LIMIT_S, seed=0)
    answer = [m.value for m in at.markdown if m.value.startswith("#### ")]
    assert answer == [f"#### {plan_numbers.answer_sentence(truth)}"]
    best = plan_numbers.best_plan(truth)
    assert best is not None and f"ε = {plan_numbers.fmt_eps(best.epsilon_per_km)}" in answer[0]
    assert f"{best.adversary_error_m:,.0f} m" in answer[0] and "12 reports a day" in answer[0]
    table = at.dataframe[0].value
    assert list(table["mechanism"]) == ["Planar Laplace", "Exponential (EM)"]
    for row, m in zip(table.to_dict("records"), truth.mechanisms, strict=True):
        assert row["ε (1/km)"] == pytest.approx(m.epsilon_per_km, rel=1e-12)
        assert row["ε a day (1/km)"] == pytest.approx(12 * m.epsilon_per_km, rel=1e-12)
        assert row["expected error (m)"] == pytest.approx(m.loss_m, rel=1e-9)
        assert row["attacker's error (m)"] == pytest.approx(m.adversary_error_m, rel=1e-9)
        assert row["attacker within 250 m"] == plan_numbers.fmt_pct(m.risk.chance_within[1])
    assert at.query_params["target"] == "450" and at.query_params["perday"] == "12"
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == ["Brief (PDF)", "Brief (HTML)", "Places (GeoPackage)", "Places (GeoJSON)"], labels


def test_a_target_below_the_reachable_error_gets_a_sentence():
    at = support.make_app(PAGE, target="5")
    run_ok(at)
    answer = next(m.value for m in at.markdown if m.value.startswith("#### "))
    inst = _page_instance()
    reachable = float(inst.prior @ inst.cost_m.min(axis=1))
    assert "No mechanism can keep the expected error within 5 m" in answer
    assert f"costs {reachable:,.0f} m on average" in answer
    assert not at.dataframe[0].value["ε (1/km)"].notna().any()


@pytest.mark.parametrize(
    ("key", "value"),
    [("target", "nan"), ("target", "1e999"), ("target", "-3"), ("target", "200.5"), ("perday", "0"), ("floor", "x")],
)
def test_hostile_plan_links_are_a_sentence(key, value):
    at = support.make_app(PAGE, **{key: value})
    run_ok(at)
    warnings = [w.value for w in at.warning]
    assert any(f"'{key}={value}'" in w and "ignored" in w for w in warnings), warnings
    assert any(m.value.startswith("#### ") for m in at.markdown)  # the page still answers, with its default


def test_a_plan_is_kept_in_the_store_and_read_back_whole(small, tmp_path):
    """The record written for the result store reads back as the same plan; a damaged one is a ValueError."""
    inst, result = small
    doc, arrays = plan_record(result)
    back = plan_from_record(json.loads(json.dumps(doc)), arrays, n_places=inst.n_records)
    assert _same(back.summary(), result.summary())
    for a, b in zip(back.mechanisms, result.mechanisms, strict=True):
        np.testing.assert_array_equal(a.place_loss_m, b.place_loss_m)
        np.testing.assert_array_equal(a.risk.place_error_m, b.risk.place_error_m)
        np.testing.assert_array_equal(a.risk.guesses, b.risk.guesses)
    assert plan_numbers.answer_sentence(back) == plan_numbers.answer_sentence(result)
    for damage in (
        lambda d, a: d.pop("mechanisms"),
        lambda d, a: d["mechanisms"][0].update(loss_m="far"),
        lambda d, a: a.update(m0_place_loss_m=np.zeros(inst.n_records + 1)),
        lambda d, a: a.pop("m1_guesses"),
        lambda d, a: d.update(grid_per_km=[1.0, float("inf")]),
    ):
        d, a = json.loads(json.dumps(doc)), dict(arrays)
        damage(d, a)
        with pytest.raises(ValueError, match="not a plan"):
            plan_from_record(d, a, n_places=inst.n_records)
    # Through the store itself (SQLite): kept, read back, and a different question is a different entry.
    from app.server import result_store

    url = f"sqlite:///{tmp_path / 'store.db'}"
    inputs = plan_key_inputs(("city:kotka", 40, 4, 12, 3, "straight", 1, "uniform"), 400.0, ("laplace", "em"), 288, 0.0)
    assert result_store.put_value("plan", inputs, doc, arrays, url=url)
    kept_doc, kept_arrays, _ = result_store.get_value("plan", inputs, url=url)
    assert _same(plan_from_record(kept_doc, kept_arrays).summary(), result.summary())
    assert result_store.get_value("plan", [*inputs[:1], 401.0, *inputs[2:]], url=url) is None


def _same(a, b) -> bool:
    """Plain data equal, NaN equal to NaN."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def test_answer_sentence_and_rows_come_from_the_plan(small):
    inst, result = small
    best = plan_numbers.best_plan(result)
    assert best.adversary_error_m == max(m.adversary_error_m for m in result.mechanisms)
    text = plan_numbers.answer_sentence(result)
    for value in (best.loss_m, best.adversary_error_m, best.day.error_m[-1], best.day.defence_error_m[-1]):
        assert f"{value:,.0f} m" in text
    assert plan_numbers.fmt_eps(best.epsilon_day_per_km) in text and "288 reports a day" in text
    rows = plan_numbers.table_rows(result)
    for row, m in zip(rows, result.mechanisms, strict=True):
        err, se = m.day.error_m[-1], m.day.stderr_m[-1]
        assert row["attacker after 288 reports"] == f"{err:,.0f} m ± {se:,.0f} m"
        assert row["worst-off 10 %: attacker's error (m)"] == m.risk.worst_share_error_m
    assert plan_numbers.fmt_eps(1106.4) == "1,106/km" and plan_numbers.fmt_eps(3.8415) == "3.84/km"
    assert plan_numbers.fmt_eps(math.nan) == "—"


def test_the_gis_files_hold_the_library_s_numbers(small):
    """Both files read back with geopandas (and pyogrio): WGS84 written, every value the plan's."""
    inst, result = small
    labels = tuple(f"Place {x}" for x in range(inst.n_records))
    gpkg = plan_geopackage(result, inst, labels, "em")
    assert pyogrio.list_layers(io.BytesIO(gpkg))[:, 0].tolist() == ["places", "exposure"]
    places = gpd.read_file(io.BytesIO(gpkg), layer="places")
    assert places.crs.to_epsg() == 4326
    np.testing.assert_array_equal(places.geometry.x, inst.lon)
    np.testing.assert_array_equal(places.geometry.y, inst.lat)
    np.testing.assert_array_equal(places["prior"], inst.prior)
    for m in result.mechanisms:
        np.testing.assert_array_equal(places[f"{m.method}_report_error_m"], m.place_loss_m)
        np.testing.assert_array_equal(places[f"{m.method}_attacker_error_m"], m.risk.place_error_m)
        flagged = m.risk.place_error_m <= m.risk.worst_share_threshold_m
        np.testing.assert_array_equal(places[f"{m.method}_worst_off"].astype(bool), flagged)
    exposure = gpd.read_file(io.BytesIO(gpkg), layer="exposure")
    em = result.of("em")
    keep = np.flatnonzero(em.risk.place_error_m <= em.risk.worst_share_threshold_m)
    np.testing.assert_array_equal(exposure["place"], keep)
    np.testing.assert_array_equal(exposure["attacker_error_m"], em.risk.place_error_m[keep])
    gj = plan_geojson(result, inst, labels)
    assert "CRS84" in json.loads(gj)["crs"]["properties"]["name"]
    back = gpd.read_file(io.BytesIO(gj))
    np.testing.assert_allclose(back.geometry.x, inst.lon, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(back["em_attacker_error_m"], em.risk.place_error_m)
    assert back["label"].tolist() == list(labels)
    assert re.fullmatch(r"Place \d+", back["label"][0])


def _brief_view(**changes) -> BriefView:
    view = BriefView(
        date="2026-12-08",
        place_name="Kotka, FI",
        attribution="(c) OpenStreetMap contributors, ODbL 1.0",
        n_places=40,
        n_outputs=12,
        prior_words="Uniform",
        mapped="em",
        map_svg="<svg id='map'></svg>",
        chart_svg="<svg id='chart'></svg>",
        link="http://127.0.0.1:8501/plan?target=400&perday=288",
    )
    return dataclasses.replace(view, **changes)


def test_the_brief_states_the_plan_and_is_the_same_file_for_the_same_view(small):
    _, result = small
    page = brief_html(result, _brief_view())
    assert page == brief_html(result, _brief_view())  # nothing in it but the stated date depends on when
    flat = re.sub(r"<[^>]+>", "", page)
    assert html.unescape(re.sub(r"\*\*", "", plan_numbers.answer_sentence(result))) in html.unescape(
        " ".join(flat.split())
    )
    for m in result.mechanisms:
        assert f"{m.adversary_error_m:,.0f}" in flat and plan_numbers.audit_words(m) in flat
        assert f"{m.risk.worst_share_error_m:,.0f} m on average" in flat
    assert flat.count("2026-12-08") == 1 and "Uniform" in flat and "288 reports per person a day" in flat
    assert segno.make(_brief_view().link, error="m").svg_inline(scale=2, dark="#1f1f1f") in page
    assert "<svg id='map'></svg>" in page and "<svg id='chart'></svg>" in page
    assert "http" not in re.sub(r'href="[^"]*"|xmlns="[^"]*"|>http[^<]*<', "", page.split("<body>")[1])


def test_the_brief_escapes_what_a_link_or_an_upload_named():
    inst_name = '<script>alert(1)</script> "Town"'
    link = 'http://x/plan?a=1&b="><script>alert(2)</script>'
    page = brief_html(
        plan(
            panda.make_instance(
                panda.load_city("kotka"), n_records=20, n_outputs=6, n_users=3, seed=1, loss="straight"
            ),
            2000.0,
            methods=("em",),
        ),
        _brief_view(place_name=inst_name, link=link),
    )
    assert "<script>" not in page and "&lt;script&gt;alert(1)" in page


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils (.ci/run installs it)")
def test_the_brief_prints_to_a_pdf_that_reads_as_the_page(small):
    _, result = small
    pdf = html_to_pdf(brief_html(result, _brief_view()))
    assert pdf[:5] == b"%PDF-"
    text = subprocess.run(["pdftotext", "-", "-"], input=pdf, capture_output=True, check=True).stdout.decode()
    flat = " ".join(text.split())
    assert "Which ε for an expected error of" in flat and "Reopen it" in flat
    assert f"ε = {plan_numbers.fmt_eps(plan_numbers.best_plan(result).epsilon_per_km)}" in flat


def test_a_pdf_without_chromium_is_a_sentence(monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    with pytest.raises(ExportError, match="needs Chromium"):
        html_to_pdf("<p>hi</p>")
