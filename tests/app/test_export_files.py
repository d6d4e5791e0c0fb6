"""The Lesson's take-away files: charts as PNG/SVG, the map as PNG, the shown matrix as CSV, JSON and npz.

Files are read back the way a person's tools would (the PNG header, an XML parser, ``numpy.load``,
``pandas.read_csv``) and compared with what the page shows. Image tests need kaleido's headless Chromium:
they are skipped, with the reason, only where the server has none (``export_files.image_export_problem``).
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
import time
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import psutil
import pytest

pytest.importorskip("plotly")
pytest.importorskip("streamlit")

import panda  # noqa: E402
from app.figures import lesson_charts, lesson_maps, maps, static_map  # noqa: E402
from app.model import export_files, lesson_numbers
from app.model.params import Params  # noqa: E402
from app.widgets import export_menu
from panda.mechanisms import build_em  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SVG_NS = "{http://www.w3.org/2000/svg}"
EPS = 5.0
needs_browser = pytest.mark.skipif(
    export_files.image_export_problem() is not None, reason=str(export_files.image_export_problem())
)


@pytest.fixture(scope="module")
def view():
    """A small Kotka view with EM's matrix, two places, A's expected error and ten sampled reports."""
    net = panda.load_city("kotka")
    inst = panda.make_instance(net, n_records=80, n_outputs=30, n_users=8, seed=0)
    matrix = build_em(inst, EPS).matrix
    a = lesson_numbers.default_place(inst)
    b = lesson_numbers.second_place(inst, a)
    segments, _ = maps.road_segments(net)
    row_a = matrix[a]
    ring_m = lesson_numbers.expected_error_m(row_a, inst.cost_m[a])
    samples = np.random.default_rng(0).choice(row_a.size, size=10, p=row_a / row_a.sum()).tolist()
    map_inputs = {
        "instance": inst,
        "segments": segments,
        "place_a": a,
        "place_b": b,
        "row_a": row_a,
        "ring_m": ring_m,
        "samples": samples,
        "height_px": 540,
        "width_px": 480,
    }
    meta = export_files.lesson_meta(Params(source="city:kotka", n_records=80, n_outputs=30, n_users=8), inst, "em", EPS)
    return {"net": net, "inst": inst, "matrix": matrix, "a": a, "b": b, "map_inputs": map_inputs, "meta": meta}


@pytest.fixture(scope="module")
def two_places_fig(view):
    inst, m, a, b = view["inst"], view["matrix"], view["a"], view["b"]
    d_km = float(inst.distances_km_pairs(np.array([a]), np.array([b]))[0])
    check = lesson_numbers.pair_check(m[a], m[b], d_km, EPS)
    return lesson_charts.two_places(check, m[a], m[b], height=340)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk."""
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def by_name(fig, name: str):
    traces = [t for t in fig.data if t.name == name]
    assert len(traces) == 1, [t.name for t in fig.data]
    return traces[0]


def haversine_m(lon0: float, lat0: float, lon: np.ndarray, lat: np.ndarray) -> np.ndarray:
    p0, p = math.radians(lat0), np.radians(lat)
    h = np.sin((p - p0) / 2) ** 2 + math.cos(p0) * np.cos(p) * np.sin(np.radians(lon - lon0) / 2) ** 2
    return 2000.0 * panda.network.EARTH_RADIUS_KM * np.arcsin(np.sqrt(h))


# --------------------------------------------------------------------------------------------
# The matrix: CSV, JSON parameters, npz
# --------------------------------------------------------------------------------------------


def test_file_names_say_what_they_hold(view):
    assert export_files.file_stem(view["meta"]) == "kotka_K80_em_eps5"
    meta = {**view["meta"], "network": "Neubrandenburg", "n_records": 500, "epsilon_per_km": 2.5}
    assert export_files.file_stem(meta) == "neubrandenburg_K500_em_eps2.5"
    names = [d.file_name for d in export_menu.downloads(
        instance=view["inst"], figures={"two-places": None}, map_inputs=view["map_inputs"],
        matrix=view["matrix"], meta=view["meta"])]  # fmt: skip
    assert names == [
        "kotka_K80_em_eps5_two-places.png",
        "kotka_K80_em_eps5_two-places.svg",
        "kotka_K80_em_eps5_map.png",
        "kotka_K80_em_eps5_matrix.csv",
        "kotka_K80_em_eps5_matrix.json",
        "kotka_K80_em_eps5_matrix.npz",
    ]


def test_npz_round_trips_the_matrix_and_its_parameters(view):
    inst, matrix, meta = view["inst"], view["matrix"], view["meta"]
    data = export_files.matrix_npz(matrix, inst, meta)
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        assert np.array_equal(npz["matrix"], matrix)
        assert np.array_equal(npz["row_records"], np.arange(inst.n_records))
        assert np.array_equal(npz["output_records"], np.asarray(inst.outputs))
        assert np.array_equal(npz["output_lon"], np.asarray(inst.lon)[inst.outputs])
        assert np.array_equal(npz["row_lat"], np.asarray(inst.lat))
        for key in export_files.MATRIX_META_KEYS:
            assert npz[key].shape == ()
            assert npz[key].item() == meta[key], key
        assert npz["n_records"].dtype == np.int64 and npz["epsilon_per_km"].dtype == np.float64
        assert npz["mechanism"].item() == "em" and npz["loss"].item() == inst.loss
        assert json.loads(npz["meta_json"].item()) == meta
        assert "OpenStreetMap" in npz["attribution"].item()


def test_csv_reads_back_with_pandas_to_the_same_matrix(view):
    inst, matrix, meta = view["inst"], view["matrix"], view["meta"]
    table = pd.read_csv(io.StringIO(export_files.mechanism_matrix_csv(matrix, inst, meta)))
    assert list(table.columns[:3]) == ["place_record", "place_lon", "place_lat"]
    assert table.shape == (inst.n_records, 3 + inst.n_outputs)
    assert np.array_equal(table.iloc[:, 3:].to_numpy(), matrix)  # exact: shortest round-trip decimals
    assert np.array_equal(table["place_record"].to_numpy(), np.arange(inst.n_records))
    np.testing.assert_allclose(table["place_lon"].to_numpy(), inst.lon, atol=1e-7)
    y = int(inst.outputs[3])
    assert table.columns[3 + 3] == export_files.output_column(3, y, inst.lon[y], inst.lat[y])
    params = json.loads(export_files.matrix_meta_json(matrix, inst, meta))
    assert params["parameters"] == meta
    assert params["shape"] == [inst.n_records, inst.n_outputs]
    assert params["csv_file"] == "kotka_K80_em_eps5_matrix.csv"


def test_anchor_rows_carry_their_places(view):
    inst, matrix = view["inst"], view["matrix"]
    meta = {**view["meta"], "rows": "anchors"}
    anchors = np.array([5, 17, 40])
    table = pd.read_csv(
        io.StringIO(export_files.mechanism_matrix_csv(matrix[anchors], inst, meta, row_records=anchors))
    )
    assert table["anchor_record"].tolist() == anchors.tolist()
    assert np.array_equal(table.iloc[:, 3:].to_numpy(), matrix[anchors])
    with np.load(io.BytesIO(export_files.matrix_npz(matrix[anchors], inst, meta, row_records=anchors))) as npz:
        assert npz["row_records"].tolist() == anchors.tolist() and npz["rows"].item() == "anchors"


def test_bad_matrix_inputs_say_what_to_do(view):
    inst, matrix, meta = view["inst"], view["matrix"], view["meta"]
    with pytest.raises(ValueError, match="one column per output"):
        export_files.matrix_npz(matrix[:, :5], inst, meta)
    with pytest.raises(ValueError, match="one row per place .* or pass 'row_records'"):
        export_files.mechanism_matrix_csv(matrix[:4], inst, meta)
    with pytest.raises(ValueError, match="Missing: seed"):
        export_files.matrix_npz(matrix, inst, {k: v for k, v in meta.items() if k != "seed"})
    with pytest.raises(ValueError, match="'mechanism' parameter of lesson_meta must be one of"):
        export_files.lesson_meta(Params(), inst, "nope", EPS)
    with pytest.raises(ValueError, match="one row per place"):
        export_menu.downloads(instance=inst, figures={}, map_inputs=None, matrix=matrix[:4], meta=meta)


def test_matrix_downloads_make_the_same_files(view):
    items = export_menu.downloads(
        instance=view["inst"], figures={}, map_inputs=None, matrix=view["matrix"], meta=view["meta"]
    )
    made = {d.file_name: d.make() for d in items}
    assert not any(d.needs_browser for d in items)
    assert made["kotka_K80_em_eps5_matrix.csv"] == export_files.mechanism_matrix_csv(
        view["matrix"], view["inst"], view["meta"]
    )
    with np.load(io.BytesIO(made["kotka_K80_em_eps5_matrix.npz"])) as npz:
        assert np.array_equal(npz["matrix"], view["matrix"])


# --------------------------------------------------------------------------------------------
# The static map
# --------------------------------------------------------------------------------------------


def test_static_map_draws_the_deck_layers_at_their_places(view):
    inst, a, b = view["inst"], view["a"], view["b"]
    inputs = view["map_inputs"]
    fig = static_map.static_lesson_map(**inputs)
    lon, lat = np.asarray(inst.lon), np.asarray(inst.lat)
    marker_a, marker_b = by_name(fig, "Place A"), by_name(fig, "Place B")
    assert (marker_a.x[0], marker_a.y[0]) == (lon[a], lat[a])
    assert (marker_b.x[0], marker_b.y[0]) == (lon[b], lat[b])
    # The same discs as the deck: one per output at least 1e-4 of the likeliest, at the output's place.
    deck = json.loads(lesson_maps.build_lesson_deck(**inputs).to_json())
    deck_reports = next(layer for layer in deck["layers"] if layer["id"] == "reports")["data"]
    discs = by_name(fig, static_map.TRACE_NAMES["reports"])
    assert len(discs.x) == len(deck_reports)
    ours = np.array(sorted(zip(discs.x, discs.y, strict=True)))
    theirs = np.array(sorted(tuple(d["p"]) for d in deck_reports))
    np.testing.assert_allclose(ours, theirs, atol=2e-6)  # the deck rounds to 1e-6 degrees
    # The ring: every point at A's expected error from A.
    ring = next(t for t in fig.data if t.name.startswith(static_map.TRACE_NAMES["ring"]))
    dist = haversine_m(lon[a], lat[a], np.asarray(ring.x), np.asarray(ring.y))
    np.testing.assert_allclose(dist, inputs["ring_m"], rtol=0.01)
    samples = by_name(fig, "Sampled reports")
    assert len(samples.x) == len(inputs["samples"])
    # Equal lengths: a degree of latitude is 1/cos(lat) times as long on screen as a degree of longitude.
    lat0 = (lat.min() + lat.max()) / 2
    assert fig.layout.yaxis.scaleanchor == "x"
    assert fig.layout.yaxis.scaleratio == pytest.approx(1 / math.cos(math.radians(lat0)))
    assert "OpenStreetMap contributors" in fig.layout.annotations[0].text
    roads = by_name(fig, "Roads")
    assert sum(v is None for v in roads.x) == len(inputs["segments"])


def test_static_map_attacker_mode_and_laplace_glow(view):
    inst, matrix, a = view["inst"], view["matrix"], view["a"]
    report = int(np.argmax(matrix[a]))
    belief = lesson_numbers.posterior(inst.prior, matrix, report)
    guess = lesson_numbers.bayes_guess(belief, inst.d_km * 1000.0)
    density = lesson_maps.laplace_density_image(float(inst.lon[a]), float(inst.lat[a]), EPS, half_width_km=0.5)
    fig = static_map.static_lesson_map(
        inst, view["map_inputs"]["segments"], place_a=a, belief=belief, report=report, guess=guess, density=density
    )
    names = [t.name for t in fig.data]
    assert "Attacker's belief" in names and static_map.TRACE_NAMES["reports"] not in names
    y = int(inst.outputs[report])
    assert (by_name(fig, "The report").x[0], by_name(fig, "The report").y[0]) == (inst.lon[y], inst.lat[y])
    assert (by_name(fig, "Attacker's best guess").x[0]) == inst.lon[guess]
    (image,) = fig.layout.images
    assert image.source == density[0] and image.x == density[1][0] and image.y == density[1][3]
    with pytest.raises(ValueError, match="'place_a' parameter of static_lesson_map must be a place in 0..79"):
        static_map.static_lesson_map(inst, [], place_a=80)


# --------------------------------------------------------------------------------------------
# Images (kaleido + Chromium)
# --------------------------------------------------------------------------------------------


@needs_browser
def test_chart_png_has_the_signature_and_size(two_places_fig):
    data = export_files.figure_image(two_places_fig, "png", width_px=640, scale=2)
    assert png_size(data) == (1280, 680)  # 640 x 340 CSS pixels at scale 2


@needs_browser
def test_chart_svg_parses_and_holds_the_trace_data(two_places_fig):
    data = export_files.figure_image(two_places_fig, "svg", width_px=640)
    root = ET.fromstring(data)
    assert root.tag == f"{SVG_NS}svg"
    assert (root.get("width"), root.get("height")) == ("640", "340")
    bar_traces = [g for g in root.iter(f"{SVG_NS}g") if "bars" in (g.get("class") or "").split()]
    n_bars = [len([p for p in g.iter(f"{SVG_NS}g") if p.get("class") == "point"]) for g in bar_traces]
    assert n_bars == [len(t.y) for t in two_places_fig.data if t.type == "bar"]
    texts = {t.text for t in root.iter(f"{SVG_NS}text")}
    assert {"from A", "from B"} <= texts


@needs_browser
def test_map_png_has_the_signature_and_size(view):
    items = export_menu.downloads(
        instance=view["inst"], figures={}, map_inputs=view["map_inputs"], matrix=None, meta=view["meta"]
    )
    (map_png,) = items
    assert map_png.file_name == "kotka_K80_em_eps5_map.png" and map_png.mime == "image/png"
    assert png_size(map_png.make()) == (2 * 480, 2 * 540)


@needs_browser
def test_the_shared_browser_closes_when_idle(two_places_fig):
    """One Chromium for the process, gone after its idle time: nothing is held between downloads."""
    renderer = export_files._Renderer(idle_s=0.5)
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    data = renderer.render(two_places_fig.to_dict(), {"format": "svg", "width": 300, "height": 200, "scale": 1},
                           path=export_files.browser_path(), timeout_s=60)  # fmt: skip
    assert data.startswith(b"<svg")
    assert renderer.is_open
    started = [p for p in me.children(recursive=True) if p.pid not in before]
    assert started  # the browser runs
    # ... behind a closed loopback proxy: nothing it fetches by itself leaves the machine.
    assert any(f"--proxy-server={export_files.NO_NETWORK_PROXY}" in p.cmdline() for p in started)
    deadline = time.monotonic() + 20
    while renderer.is_open and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not renderer.is_open
    deadline = time.monotonic() + 20
    while (
        left := {p.pid for p in me.children(recursive=True) if p.is_running()} - before
    ) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left


@needs_browser
def test_the_image_browser_runs_without_kaleidos_unsafe_flags(two_places_fig):
    """choreographer starts Chromium with --disable-web-security and --allow-file-access-from-files; the image
    browser runs without them, and still draws."""
    me = psutil.Process()
    export_files._RENDERER.close()
    before = {p.pid for p in me.children(recursive=True)}
    data = export_files.figure_image(two_places_fig, "svg", width_px=300)
    assert data.startswith(b"<svg")
    started = [p for p in me.children(recursive=True) if p.pid not in before]
    browsers = [p for p in started if "chrom" in p.name().lower() and not any("--type=" in a for a in p.cmdline())]
    assert browsers, [p.cmdline()[:2] for p in started]  # the browser's main process runs
    for p in browsers:
        assert not set(p.cmdline()) & set(export_files.UNSAFE_BROWSER_FLAGS), p.cmdline()
    launcher = export_files.safe_launcher(export_files.browser_path())
    assert os.stat(launcher).st_mode & 0o077 == 0 and os.stat(os.path.dirname(launcher)).st_mode & 0o077 == 0
    export_files._RENDERER.close()


def test_without_a_browser_images_fail_with_a_sentence(monkeypatch, two_places_fig, view):
    monkeypatch.setenv("BROWSER_PATH", "/nonexistent/chromium")
    problem = export_files.image_export_problem()
    assert problem is not None and "needs Chromium" in problem
    with pytest.raises(export_files.ExportError, match="needs Chromium"):
        export_files.figure_image(two_places_fig, "png")
    with pytest.raises(ValueError, match="'fmt' parameter of figure_image must be one of"):
        export_files.figure_image(two_places_fig, "jpeg")


# --------------------------------------------------------------------------------------------
# The menu in a page
# --------------------------------------------------------------------------------------------


def _menu_page(with_matrix: bool = True, browser: str | None = None) -> None:
    import os

    import numpy as np  # noqa: F401 (AppTest runs this function's body as a script)

    import panda
    from app.figures import lesson_charts, maps
    from app.model import export_files, lesson_numbers
    from app.model.params import Params
    from app.widgets import export_menu
    from panda.mechanisms import build_em

    if browser is not None:
        os.environ["BROWSER_PATH"] = browser
    net = panda.load_city("kotka")
    inst = panda.make_instance(net, n_records=80, n_outputs=30, n_users=8, seed=0)
    m = build_em(inst, 5.0).matrix
    a = lesson_numbers.default_place(inst)
    b = lesson_numbers.second_place(inst, a)
    check = lesson_numbers.pair_check(m[a], m[b], float(inst.distances_km_pairs(np.array([a]), np.array([b]))[0]), 5.0)
    segments, _ = maps.road_segments(net)
    export_menu.export_menu(
        instance=inst,
        figures={"two-places": lesson_charts.two_places(check, m[a], m[b])},
        map_inputs={"instance": inst, "segments": segments, "place_a": a, "place_b": b, "row_a": m[a]},
        matrix=m if with_matrix else None,
        meta=export_files.lesson_meta(Params(source="city:kotka"), inst, "em", 5.0),
    )


def test_menu_renders_every_button_without_running_any(monkeypatch):
    from streamlit.testing.v1 import AppTest

    calls = []
    monkeypatch.setattr(export_files, "figure_image", lambda *a, **k: calls.append(a) or b"")
    monkeypatch.setattr(export_files, "matrix_npz", lambda *a, **k: calls.append(a) or b"")
    at = AppTest.from_function(_menu_page, default_timeout=60).run()
    assert not at.exception, [e.message for e in at.exception]
    buttons = at.get("download_button")
    assert [b.proto.label for b in buttons] == [
        "Two places · PNG",
        "Two places · SVG",
        "Map · PNG",
        "Matrix · CSV",
        "Parameters · JSON",
        "Matrix + parameters · npz",
    ]
    assert not calls  # deferred: nothing drawn or written while the page runs
    assert all(b.proto.ignore_rerun for b in buttons)  # a click does not rerun the page
    if export_files.image_export_problem() is None:
        assert not any(b.proto.disabled for b in buttons)


def test_menu_without_browser_or_matrix_says_so():
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(
        _menu_page, kwargs={"with_matrix": False, "browser": "/nonexistent/chromium"}, default_timeout=60
    ).run()
    try:
        assert not at.exception, [e.message for e in at.exception]
        buttons = at.get("download_button")
        assert [b.proto.label for b in buttons] == ["Two places · PNG", "Two places · SVG", "Map · PNG"]
        assert all(b.proto.disabled for b in buttons)
        captions = " ".join(c.value for c in at.caption)
        assert "needs Chromium" in captions and "No matrix to download" in captions
    finally:
        import os

        os.environ.pop("BROWSER_PATH", None)


# --------------------------------------------------------------------------------------------
# A real click in a real browser (deferred download, no rerun)
# --------------------------------------------------------------------------------------------

_CLICK_APP = """
import sys
sys.path.insert(0, {root!r})
import numpy as np
import streamlit as st
import panda
from app.figures import maps
from app.model import export_files, lesson_numbers
from app.widgets import export_menu
from app.model.params import Params
from panda.mechanisms import build_em

net = panda.load_city("kotka")
inst = panda.make_instance(net, n_records=80, n_outputs=30, n_users=8, seed=0)
m = build_em(inst, 5.0).matrix
a = lesson_numbers.default_place(inst)
st.session_state.runs = st.session_state.get("runs", 0) + 1
st.write(f"script runs: {{st.session_state.runs}}")
export_menu.export_menu(
    instance=inst, figures={{}},
    map_inputs={{"instance": inst, "segments": maps.road_segments(net)[0], "place_a": a, "row_a": m[a],
                "height_px": 300, "width_px": 280}},
    matrix=m, meta=export_files.lesson_meta(Params(source="city:kotka"), inst, "em", 5.0),
)
"""


@pytest.mark.browser
@needs_browser
@pytest.mark.timeout(240)
def test_a_click_downloads_the_file_without_rerunning_the_page(tmp_path, view):
    import subprocess
    import sys

    from browser_support import CHROMIUM, CHROMIUM_ARGS, _free_port, _wait_healthy
    from conftest import ROOT

    sync_api = pytest.importorskip("playwright.sync_api")
    script = tmp_path / "menu_app.py"
    script.write_text(_CLICK_APP.format(root=str(ROOT)))
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless=true"]
    cmd += ["--server.address=127.0.0.1", f"--server.port={port}", "--browser.gatherUsageStats=false"]
    cmd += ["--server.fileWatcherType=none"]
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_healthy(url, proc)
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
                try:
                    page = browser.new_page(accept_downloads=True)
                    page.goto(url)
                    page.get_by_text("script runs: 1").wait_for(timeout=60_000)
                    page.get_by_role("button", name="Download").click()
                    files = {}
                    for label in ("Map · PNG", "Matrix + parameters · npz"):
                        with page.expect_download(timeout=90_000) as info:
                            page.get_by_role("button", name=label).click()
                        path = tmp_path / info.value.suggested_filename
                        info.value.save_as(path)
                        files[path.name] = path.read_bytes()
                    page.wait_for_timeout(500)
                    assert page.get_by_text("script runs: 1").is_visible()  # the clicks did not rerun the page
                finally:
                    browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    assert png_size(files["kotka_K80_em_eps5_map.png"]) == (560, 600)
    with np.load(io.BytesIO(files["kotka_K80_em_eps5_matrix.npz"]), allow_pickle=False) as npz:
        assert np.array_equal(npz["matrix"], view["matrix"]) and npz["epsilon_per_km"].item() == EPS


def test_a_chart_given_as_a_builder_is_built_only_when_downloaded(view, monkeypatch):
    """The Lesson hands the menu a function for its Two places chart: the page's run builds no figure, and
    the click builds it once and exports exactly that figure."""
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=["1", "2"], y=[0.4, 0.6]))
    built: list[go.Figure] = []
    exported: list[tuple] = []

    def build() -> go.Figure:
        built.append(fig)
        return fig

    monkeypatch.setattr(export_files, "figure_image", lambda f, fmt, **k: exported.append((f, fmt)) or b"svg")
    items = export_menu.downloads(
        instance=view["inst"], figures={"two-places": build}, map_inputs=None, matrix=None, meta=view["meta"]
    )
    assert [d.file_name.rsplit("_", 1)[-1] for d in items] == ["two-places.png", "two-places.svg"]
    assert built == []
    svg = next(d for d in items if d.file_name.endswith(".svg"))
    assert svg.make() == b"svg"
    assert built == [fig] and exported == [(fig, "svg")]
