"""Downloads of a view: its configuration, its result summary, its matrices, its charts as images.

JSON: strict JSON (no NaN or Infinity literals). A number that is not finite is written as ``null``:
"not available" (NaN: say, no lower bound) and "infinite" (say, an infinite safety margin) alike; the
files say so in their ``"notes"`` field. CSV: a plain table that spreadsheets and ``pandas.read_csv``
read with their defaults (one header row, no comment lines); a mechanism matrix's parameters travel
beside it in a JSON file of the same name (:func:`matrix_meta_json`) and inside its ``.npz``
(:func:`matrix_npz`).

Images (:func:`figure_image`): plotly figures drawn to PNG or SVG by kaleido in a headless Chromium
(a system Chromium, never a downloaded one). One browser serves the process, one image at a time, and
is closed after :data:`BROWSER_IDLE_S` seconds without a request: nothing runs until someone asks for
an image. Everything else here is pure.
"""

from __future__ import annotations

import asyncio
import atexit
import csv
import importlib.util
import io
import json
import math
import os
import re
import shlex
import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import numpy as np

import panda
from app.model.params import Params, to_query

__all__ = [
    "jsonable",
    "config_json",
    "summary_json",
    "matrix_csv",
    "output_column",
    "JSON_NOTE",
    "MATRIX_META_KEYS",
    "ExportError",
    "lesson_meta",
    "file_stem",
    "mechanism_matrix_csv",
    "matrix_meta_json",
    "matrix_npz",
    "matrix_parts",
    "IMAGE_FORMATS",
    "browser_path",
    "image_export_problem",
    "figure_image",
]

#: The ``"notes"`` of every JSON download.
JSON_NOTE = (
    "Distances in metres (_m) or kilometres (_km), times in seconds (_s), rates as fractions of 1. "
    "null: the number is not available or not finite (NaN or infinity)."
)


def jsonable(obj: object) -> object:
    """Plain JSON data: numpy scalars and arrays converted, non-finite floats (NaN, ±infinity) as None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer, int)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return value if math.isfinite(value) else None
    return obj


def config_json(params: Params, config: panda.PandaConfig) -> str:
    """The view (as its link's query string) and the full PandaConfig."""
    query = to_query(params)
    data = {
        "panda_explorer_view": query,
        "link_query_string": "?" + urlencode(query),
        "panda_config": config.to_dict(),
        "attribution": panda.OSM_ATTRIBUTION,
        "notes": JSON_NOTE,
    }
    return json.dumps(jsonable(data), indent=2, allow_nan=False)


def summary_json(result: panda.PandaResult, bound: dict | None = None) -> str:
    """``result.summary()`` plus the dashboard's lower bound (strict JSON; non-finite numbers as null)."""
    data = result.summary()
    if bound is not None:
        data["dashboard_lower_bound"] = bound
    data["attribution"] = panda.OSM_ATTRIBUTION
    data["notes"] = JSON_NOTE
    return json.dumps(jsonable(data), indent=2, allow_nan=False)


def output_column(j: int, record: int, lon: float, lat: float) -> str:
    """The matrix CSV's column of output ``j``: its index, record and coordinates (degrees).

    No commas or semicolons: spreadsheets split on either, depending on the locale.
    """
    return f"output {j} (record {record} at lon {lon:.6f} lat {lat:.6f})"


def matrix_csv(result: panda.PandaResult, instance: panda.Instance) -> str:
    """The anchor perturbation matrix z as a plain CSV table.

    One row per anchor: ``anchor_record``, ``anchor_lon``, ``anchor_lat`` (degrees, WGS84), then one
    column per output holding Pr[output | surrogate anchor]; each output column's name carries the
    output's index, record and coordinates (:func:`output_column`). Rows sum to 1. Map data (c)
    OpenStreetMap contributors (the download's help and the summary JSON say so).
    """
    buf = io.StringIO()
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    outputs = [int(y) for y in instance.outputs]
    header = ["anchor_record", "anchor_lon", "anchor_lat"] + [
        output_column(j, y, lon[y], lat[y]) for j, y in enumerate(outputs)
    ]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    if result.z is None:
        return buf.getvalue()
    for a, row in zip(result.anchor_union.tolist(), result.z, strict=True):
        writer.writerow([a, f"{lon[a]:.7f}", f"{lat[a]:.7f}", *(f"{v:.6g}" for v in row)])
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# A mechanism's matrix: CSV, its parameters as JSON, NPZ

#: The parameters every matrix download carries (:func:`lesson_meta` builds them).
MATRIX_META_KEYS = (
    "source",
    "network",
    "n_records",
    "n_outputs",
    "seed",
    "epsilon_per_km",
    "mechanism",
    "mechanism_label",
    "loss",
    "loss_label",
    "rows",
)
#: What a matrix's rows are: every place (a mechanism for all K places) or PAnDA's anchors.
ROW_KINDS = {"places": "place", "anchors": "anchor"}
MATRIX_NOTE = (
    "matrix[i, j] = Pr[report output j | true place row_records[i]]; rows sum to 1. Coordinates in degrees "
    "(WGS84, lon then lat). epsilon_per_km: the privacy budget per kilometre of road distance."
)


class ExportError(RuntimeError):
    """A download could not be made; the message is a sentence for the page."""


def lesson_meta(
    params: Params, instance: panda.Instance, mechanism: str, epsilon_per_km: float, *, rows: str = "places"
) -> dict[str, Any]:
    """The parameters of the Lesson's shown matrix (:data:`MATRIX_META_KEYS`), plain values.

    Parameters
    ----------
    params
        The view (its road network source and seed).
    instance
        The view's instance (K, M, the loss function).
    mechanism
        The mechanism's key in :data:`app.model.lesson_numbers.MECHANISMS` (``"em"``, ``"laplace"``, ...).
    epsilon_per_km
        The budget the matrix was built for.
    rows
        ``"places"`` (row i is place i) or ``"anchors"`` (PAnDA: one row per anchor).
    """
    from app.model.lesson_numbers import MECHANISMS

    if mechanism not in MECHANISMS:
        msg = f"The 'mechanism' parameter of lesson_meta must be one of {tuple(MECHANISMS)}. Got {mechanism!r} instead."
        raise ValueError(msg)
    if rows not in ROW_KINDS:
        msg = f"The 'rows' parameter of lesson_meta must be one of {tuple(ROW_KINDS)}. Got {rows!r} instead."
        raise ValueError(msg)
    summary = instance.summary()
    return {
        "source": str(params.source),
        "network": str(summary["network"]),
        "n_records": int(instance.n_records),
        "n_outputs": int(instance.n_outputs),
        "seed": int(params.seed),
        "epsilon_per_km": float(epsilon_per_km),
        "mechanism": mechanism,
        "mechanism_label": MECHANISMS[mechanism][0],
        "loss": str(summary["loss"]),
        "loss_label": str(summary["loss_label"]),
        "rows": rows,
    }


def _check_meta(meta: Mapping[str, Any], where: str) -> None:
    missing = [k for k in MATRIX_META_KEYS if k not in meta]
    if missing:
        msg = (
            f"The 'meta' parameter of {where} must hold {', '.join(MATRIX_META_KEYS)} (lesson_meta builds it). "
            f"Missing: {', '.join(missing)}."
        )
        raise ValueError(msg)
    if meta["rows"] not in ROW_KINDS:
        msg = f"The 'rows' entry of {where}'s meta must be one of {tuple(ROW_KINDS)}. Got {meta['rows']!r} instead."
        raise ValueError(msg)


def file_stem(meta: Mapping[str, Any]) -> str:
    """A file name stem that says what a download holds, e.g. ``neubrandenburg_K500_em_eps5``."""
    place = re.sub(r"[^a-z0-9]+", "-", str(meta.get("network", "")).lower()).strip("-") or "map"
    mech = re.sub(r"[^a-z0-9]+", "-", str(meta.get("mechanism", "")).lower()).strip("-") or "mechanism"
    eps = float(meta.get("epsilon_per_km", float("nan")))
    return f"{place}_K{int(meta.get('n_records', 0))}_{mech}_eps{eps:g}"


def matrix_parts(
    matrix: np.ndarray, instance: panda.Instance, row_records: np.ndarray | None, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matrix as floats, its rows' records and its columns' records, checked against the instance (ValueError)."""
    z = np.asarray(matrix, dtype=float)
    outputs = np.asarray(instance.outputs, dtype=np.int64)
    if z.ndim != 2 or z.shape[1] != outputs.size:
        msg = (
            f"The 'matrix' parameter of {where} must have one column per output ({outputs.size}). "
            f"Got shape {z.shape} instead."
        )
        raise ValueError(msg)
    if row_records is None:
        if z.shape[0] != instance.n_records:
            msg = (
                f"The 'matrix' parameter of {where} must have one row per place ({instance.n_records}), or pass "
                f"'row_records'. Got {z.shape[0]} rows instead."
            )
            raise ValueError(msg)
        rows = np.arange(instance.n_records, dtype=np.int64)
    else:
        rows = np.asarray(row_records, dtype=np.int64)
        if rows.shape != (z.shape[0],) or (rows.size and (rows.min() < 0 or rows.max() >= instance.n_records)):
            msg = (
                f"The 'row_records' parameter of {where} must hold one place (0..{instance.n_records - 1}) per "
                f"matrix row ({z.shape[0]}). Got shape {rows.shape} instead."
            )
            raise ValueError(msg)
    return z, rows, outputs


def mechanism_matrix_csv(
    matrix: np.ndarray, instance: panda.Instance, meta: Mapping[str, Any], *, row_records: np.ndarray | None = None
) -> str:
    """A mechanism's matrix as a plain CSV table (its parameters: :func:`matrix_meta_json`).

    One row per matrix row: ``place_record``, ``place_lon``, ``place_lat`` (``anchor_*`` when
    ``meta["rows"]`` is ``"anchors"``; degrees, WGS84), then one column per output holding
    Pr[output | that place]; output columns are named by :func:`output_column`. Probabilities are
    written exactly (shortest round-trip decimal), so ``pandas.read_csv`` gives back the same floats.

    Parameters
    ----------
    matrix
        ``(R, M)`` row-stochastic matrix.
    instance
        The view's instance (coordinates, outputs).
    meta
        :func:`lesson_meta`'s parameters.
    row_records
        ``(R,)`` place of each row; ``None``: row i is place i (then R = K).
    """
    _check_meta(meta, "mechanism_matrix_csv")
    z, rows, outputs = matrix_parts(matrix, instance, row_records, "mechanism_matrix_csv")
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    prefix = ROW_KINDS[meta["rows"]]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        [f"{prefix}_record", f"{prefix}_lon", f"{prefix}_lat"]
        + [output_column(j, int(y), lon[y], lat[y]) for j, y in enumerate(outputs.tolist())]
    )
    for r, row in zip(rows.tolist(), z.tolist(), strict=True):
        writer.writerow([r, f"{lon[r]:.7f}", f"{lat[r]:.7f}", *row])  # floats: repr, exact
    return buf.getvalue()


def matrix_meta_json(
    matrix: np.ndarray, instance: panda.Instance, meta: Mapping[str, Any], *, row_records: np.ndarray | None = None
) -> str:
    """The parameters of a matrix download and what its CSV's columns hold (strict JSON)."""
    _check_meta(meta, "matrix_meta_json")
    z, rows, _ = matrix_parts(matrix, instance, row_records, "matrix_meta_json")
    prefix = ROW_KINDS[meta["rows"]]
    data = {
        "parameters": {k: meta[k] for k in MATRIX_META_KEYS},
        "shape": list(z.shape),
        "csv_file": file_stem(meta) + "_matrix.csv",
        "columns": {
            f"{prefix}_record": "the true place of the row (record index)",
            f"{prefix}_lon, {prefix}_lat": "its coordinates, degrees",
            "output j (record y at lon ... lat ...)": "Pr[report output j | the row's place]",
        },
        "attribution": panda.OSM_ATTRIBUTION,
        "notes": MATRIX_NOTE + " " + JSON_NOTE,
    }
    return json.dumps(jsonable(data), indent=2, allow_nan=False)


def matrix_npz(
    matrix: np.ndarray, instance: panda.Instance, meta: Mapping[str, Any], *, row_records: np.ndarray | None = None
) -> bytes:
    """A mechanism's matrix and its parameters as a compressed ``.npz`` (loads with ``allow_pickle=False``).

    Arrays: ``matrix`` ``(R, M)``; ``row_records``, ``row_lon``, ``row_lat``; ``output_records``,
    ``output_lon``, ``output_lat``; every key of :data:`MATRIX_META_KEYS` as a 0-d array (strings as
    unicode, integers as int64, floats as float64); ``attribution``, ``notes``; and ``meta_json``, all
    the parameters as one JSON string.
    """
    _check_meta(meta, "matrix_npz")
    z, rows, outputs = matrix_parts(matrix, instance, row_records, "matrix_npz")
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    arrays: dict[str, np.ndarray] = {
        "matrix": z,
        "row_records": rows,
        "row_lon": lon[rows],
        "row_lat": lat[rows],
        "output_records": outputs,
        "output_lon": lon[outputs],
        "output_lat": lat[outputs],
    }
    for key in MATRIX_META_KEYS:
        value = meta[key]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            arrays[key] = np.array(str(value))
        elif isinstance(value, (int, np.integer)):
            arrays[key] = np.array(int(value), dtype=np.int64)
        else:
            arrays[key] = np.array(float(value), dtype=np.float64)
    arrays["attribution"] = np.array(panda.OSM_ATTRIBUTION)
    arrays["notes"] = np.array(MATRIX_NOTE)
    arrays["meta_json"] = np.array(json.dumps(jsonable({k: meta[k] for k in MATRIX_META_KEYS}), allow_nan=False))
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Charts as images (kaleido + a system Chromium)

#: Image format -> MIME type.
IMAGE_FORMATS = {"png": "image/png", "svg": "image/svg+xml"}
#: Chromium-based browsers kaleido can drive, looked up on PATH in this order (after $BROWSER_PATH).
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
#: Seconds the shared browser stays open after its last image (then it is closed: no memory held).
BROWSER_IDLE_S = 60.0
#: Seconds one image (or starting the browser) may take.
RENDER_TIMEOUT_S = 60.0
#: Size of a figure that sets none (plotly's layout width is usually left to the page).
DEFAULT_WIDTH_PX, DEFAULT_HEIGHT_PX = 800, 500


def browser_path() -> str | None:
    """The Chromium kaleido will use: ``$BROWSER_PATH`` if it is a file, else the first of :data:`BROWSER_NAMES`."""
    env = os.environ.get("BROWSER_PATH")
    if env:
        return env if os.path.isfile(env) else None
    for name in BROWSER_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def image_export_problem() -> str | None:
    """Why charts cannot be downloaded as images on this server (a sentence), or ``None`` when they can."""
    if importlib.util.find_spec("kaleido") is None:
        return (
            "Chart images are not available on this server: the 'kaleido' package is missing "
            "(pip install -r requirements.txt installs it)."
        )
    if browser_path() is None:
        return (
            "Chart images are not available on this server: it needs Chromium (apt-get install chromium, or set "
            "BROWSER_PATH to a Chrome/Chromium executable). The chart's own camera button still saves a PNG."
        )
    return None


#: The image browser's proxy: the discard port on loopback, so no request of it reaches another host.
NO_NETWORK_PROXY = "127.0.0.1:9"
#: Flags kaleido's browser launcher (choreographer) always adds, and the image browser is started without: they
#: let the page kaleido draws in read local files and any origin's responses. Drawing a figure needs neither.
UNSAFE_BROWSER_FLAGS = ("--disable-web-security", "--allow-file-access-from-files")

_LAUNCHER_LOCK = threading.Lock()
_LAUNCHERS: dict[str, str] = {}


def safe_launcher(browser: str) -> str:
    """An executable that starts ``browser`` with the arguments it is given, minus :data:`UNSAFE_BROWSER_FLAGS`.

    A shell script in a folder of this process's own (mode 0700), written once per browser. On Windows
    (no ``sh``) the browser itself.
    """
    if os.name != "posix":
        return browser
    with _LAUNCHER_LOCK:
        launcher = _LAUNCHERS.get(browser)
        if launcher is None or not os.path.isfile(launcher):
            folder = tempfile.mkdtemp(prefix="panda-image-browser-")  # 0700
            launcher = os.path.join(folder, "chromium")
            dropped = "|".join(UNSAFE_BROWSER_FLAGS)
            script = (
                "#!/bin/sh\n"
                "# kaleido's browser without the flags that open local files and other origins to its page\n"
                'for arg do\n  shift\n  case "$arg" in\n'
                f"    {dropped}) ;;\n"
                '    *) set -- "$@" "$arg" ;;\n  esac\ndone\n'
                f'exec {shlex.quote(browser)} "$@"\n'
            )
            fd = os.open(launcher, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "w") as f:
                f.write(script)
            _LAUNCHERS[browser] = launcher
        return launcher


class _Renderer:
    """One headless Chromium driven by kaleido for the whole process: one image at a time, closed when idle.

    Serialised by a lock, so a class clicking at once queues (a warm browser renders an image quickly) instead
    of starting a browser each. A render that fails or times out closes the browser: the next one starts anew.
    """

    def __init__(self, idle_s: float) -> None:
        self._lock = threading.Lock()
        self._idle_s = idle_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._kaleido: Any = None
        self._path: str | None = None
        self._timer: threading.Timer | None = None
        self._generation = 0

    @property
    def is_open(self) -> bool:
        """Whether a browser is running now."""
        return self._kaleido is not None

    def render(self, fig_dict: dict, opts: dict, *, path: str, timeout_s: float) -> bytes:
        with self._lock:
            self._generation += 1
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            try:
                if self._kaleido is None or self._path != path:
                    self._close_locked()
                    self._open_locked(path, timeout_s)
                assert self._loop is not None
                future = asyncio.run_coroutine_threadsafe(self._kaleido.calc_fig(fig_dict, opts=opts), self._loop)
                try:
                    return future.result(timeout=timeout_s)
                finally:
                    future.cancel()
            except BaseException:
                self._close_locked()
                raise
            finally:
                if self._kaleido is not None:
                    generation = self._generation
                    self._timer = threading.Timer(self._idle_s, self._close_if_idle, args=(generation,))
                    self._timer.daemon = True
                    self._timer.start()

    def close(self) -> None:
        """Close the browser now (it starts again on the next image)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._close_locked()

    def _close_if_idle(self, generation: int) -> None:
        with self._lock:
            if generation == self._generation:
                self._close_locked()

    def _open_locked(self, path: str, timeout_s: float) -> None:
        import kaleido

        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="panda-image-export", daemon=True)
        thread.start()
        self._loop, self._thread, self._path = loop, thread, path

        async def _open() -> Any:
            # mathjax=False: the page kaleido draws in loads nothing from outside (plotly.js is plotly's own copy).
            # The proxy is a closed loopback port: whatever Chromium itself might fetch in the background
            # (kaleido's flags do not include --disable-background-networking) fails here, never leaves the machine.
            k = kaleido.Kaleido(path=path, mathjax=False, timeout=timeout_s, proxy_server=NO_NETWORK_PROXY)
            await k.open()
            return k

        self._kaleido = asyncio.run_coroutine_threadsafe(_open(), loop).result(timeout=timeout_s)

    def _close_locked(self) -> None:
        k, loop, thread = self._kaleido, self._loop, self._thread
        self._kaleido = self._loop = self._thread = None
        if loop is None:
            return
        if k is not None:
            try:
                asyncio.run_coroutine_threadsafe(k.close(), loop).result(timeout=15)
            except Exception:  # noqa: BLE001 (a browser that will not close cleanly is dropped all the same)
                pass
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=15)
        if not loop.is_running():
            loop.close()


_RENDERER = _Renderer(BROWSER_IDLE_S)
atexit.register(_RENDERER.close)


def figure_image(
    fig: Any,
    fmt: str = "png",
    *,
    width_px: int | None = None,
    height_px: int | None = None,
    scale: float | None = None,
    timeout_s: float = RENDER_TIMEOUT_S,
) -> bytes:
    """A plotly figure as PNG or SVG bytes, drawn by kaleido in the shared headless Chromium.

    Parameters
    ----------
    fig
        A ``plotly.graph_objects.Figure`` (or its dict).
    fmt
        ``"png"`` or ``"svg"``.
    width_px, height_px
        The layout size in CSS pixels; ``None``: the figure's own, else :data:`DEFAULT_WIDTH_PX` x
        :data:`DEFAULT_HEIGHT_PX`.
    scale
        Pixel ratio of a PNG (2: sharp on slides and printouts); ``None``: 2 for PNG, 1 for SVG.
    timeout_s
        Seconds the image (and starting the browser) may take.

    Raises
    ------
    ValueError
        An unknown format or a bad size.
    ExportError
        No kaleido or no Chromium here, or the browser failed: the message is a sentence for the page.
    """
    if fmt not in IMAGE_FORMATS:
        msg = f"The 'fmt' parameter of figure_image must be one of {tuple(IMAGE_FORMATS)}. Got {fmt!r} instead."
        raise ValueError(msg)
    problem = image_export_problem()
    if problem:
        raise ExportError(problem)
    fig_dict = fig if isinstance(fig, dict) else fig.to_dict()
    layout = fig_dict.get("layout", {})
    width = int(width_px or layout.get("width") or DEFAULT_WIDTH_PX)
    height = int(height_px or layout.get("height") or DEFAULT_HEIGHT_PX)
    if width <= 0 or height <= 0:
        msg = f"The image size of figure_image must be positive. Got {width} x {height} px instead."
        raise ValueError(msg)
    opts = {"format": fmt, "width": width, "height": height, "scale": float(scale or (2 if fmt == "png" else 1))}
    path = browser_path()
    assert path is not None  # image_export_problem() checked it
    try:
        data = _RENDERER.render(fig_dict, opts, path=safe_launcher(path), timeout_s=timeout_s)
    except TimeoutError as exc:
        msg = f"The image took longer than {timeout_s:.0f} s to draw; try again in a moment."
        raise ExportError(msg) from exc
    except Exception as exc:  # noqa: BLE001 (kaleido and the browser fail in many ways; say so in a sentence)
        msg = f"The image could not be drawn ({type(exc).__name__}: {exc}); try again in a moment."
        raise ExportError(msg) from exc
    return data if isinstance(data, bytes) else str(data).encode("utf-8")
