"""The Lesson's "Download" menu: every chart as PNG and SVG, the map as PNG, the shown matrix as CSV/JSON/npz.

Nothing is computed while the page runs: every button hands Streamlit a callable (deferred download,
``st.download_button(data=callable)``), run on a worker thread only when someone clicks, and the click
does not rerun the page (``on_click="ignore"``). Images are drawn by :func:`app.model.export_files.figure_image`
(kaleido in one shared headless Chromium). A failed download shows Streamlit's sentence "Failed to
generate file for download" under its button; where images cannot be drawn at all the menu says why
in a sentence and disables those buttons.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st

import panda
from app.figures import static_map
from app.model import export_files

__all__ = ["Download", "downloads", "export_menu"]

#: Image scale of the PNG downloads (pixel ratio: 2 is sharp on slides and printouts).
PNG_SCALE = 2


@dataclass(frozen=True)
class Download:
    """One button of the menu: its words, its file, and the function that makes the file on click."""

    group: str
    label: str
    file_name: str
    mime: str
    make: Callable[[], bytes | str]
    needs_browser: bool


def _title(slug: str) -> str:
    return slug.replace("-", " ").replace("_", " ").capitalize()


def _image(fig: go.Figure | Callable[[], go.Figure], fmt: str) -> Callable[[], bytes]:
    def make() -> bytes:
        figure = fig if isinstance(fig, go.Figure) else fig()  # a builder: the figure is made on the click
        return export_files.figure_image(figure, fmt, scale=PNG_SCALE if fmt == "png" else 1)

    return make


def _map_png(map_inputs: Mapping[str, Any]) -> Callable[[], bytes]:
    def make() -> bytes:
        fig = static_map.static_lesson_map(**map_inputs)
        return export_files.figure_image(fig, "png", scale=PNG_SCALE)

    return make


def downloads(
    *,
    instance: panda.Instance,
    figures: Mapping[str, go.Figure | Callable[[], go.Figure]],
    map_inputs: Mapping[str, Any] | None,
    matrix: np.ndarray | None,
    meta: Mapping[str, Any],
    row_records: np.ndarray | None = None,
) -> list[Download]:
    """The menu's downloads, in its order (pure: nothing is drawn or written until a ``make`` is called).

    Parameters
    ----------
    instance
        The view's instance (the matrix's coordinates).
    figures
        Chart name (a slug such as ``"two-places"``, used in the file name) -> plotly figure, or a
        function of no arguments that builds it (then it is built only when someone clicks).
    map_inputs
        The keyword arguments of :func:`app.figures.lesson_maps.build_lesson_deck` (``instance``, ``segments``,
        ``place_a``, ...), drawn again by :func:`app.figures.static_map.static_lesson_map`; ``None``: no map.
    matrix
        The shown mechanism's ``(R, M)`` matrix; ``None``: no matrix downloads.
    meta
        :func:`app.model.export_files.lesson_meta`'s parameters (they name the files and travel inside them).
    row_records
        ``(R,)`` place of each matrix row (PAnDA's anchors); ``None``: row i is place i.
    """
    stem = export_files.file_stem(meta)
    items: list[Download] = []
    for slug, fig in figures.items():
        for fmt in ("png", "svg"):
            items.append(
                Download(
                    "Charts",
                    f"{_title(slug)} · {fmt.upper()}",
                    f"{stem}_{slug}.{fmt}",
                    export_files.IMAGE_FORMATS[fmt],
                    _image(fig, fmt),
                    True,
                )
            )
    if map_inputs is not None:
        items.append(
            Download(
                "Map", "Map · PNG", f"{stem}_map.png", export_files.IMAGE_FORMATS["png"], _map_png(map_inputs), True
            )
        )
    if matrix is not None:
        z = np.asarray(matrix, dtype=float)
        args = (z, instance, meta)
        kw = {"row_records": row_records}
        # Check the shapes now: a wrong call is the page's bug and shows at once, not as a failed click.
        export_files.matrix_parts(z, instance, row_records, "downloads")
        items += [
            Download(
                "Matrix",
                "Matrix · CSV",
                f"{stem}_matrix.csv",
                "text/csv",
                lambda: export_files.mechanism_matrix_csv(*args, **kw),
                False,
            ),
            Download(
                "Matrix",
                "Parameters · JSON",
                f"{stem}_matrix.json",
                "application/json",
                lambda: export_files.matrix_meta_json(*args, **kw),
                False,
            ),
            Download(
                "Matrix",
                "Matrix + parameters · npz",
                f"{stem}_matrix.npz",
                "application/octet-stream",
                lambda: export_files.matrix_npz(*args, **kw),
                False,
            ),
        ]
    return items


def export_menu(
    *,
    instance: panda.Instance,
    figures: Mapping[str, go.Figure | Callable[[], go.Figure]],
    map_inputs: Mapping[str, Any] | None,
    matrix: np.ndarray | None,
    meta: Mapping[str, Any],
    key_prefix: str = "lesson_export",
    row_records: np.ndarray | None = None,
    label: str = "Download",
    container: Any = None,
) -> None:
    """A compact "Download" popover with a button per file (see :func:`downloads` for the arguments).

    ``key_prefix`` keys the buttons (one menu per prefix on a page); ``container`` is where the
    popover goes (``None``: the current position). A bad argument shows a sentence, never a traceback.
    """
    where = container if container is not None else st
    with where.popover(label, icon=":material/download:", help="Take the charts, the map and the matrix away."):
        try:
            items = downloads(
                instance=instance,
                figures=figures,
                map_inputs=map_inputs,
                matrix=matrix,
                meta=meta,
                row_records=row_records,
            )
        except (TypeError, ValueError, KeyError) as exc:
            st.caption(f"Downloads are not available for this view: {exc}")
            return
        problem = export_files.image_export_problem()
        if problem and any(d.needs_browser for d in items):
            st.caption(problem)
        groups = list(dict.fromkeys(d.group for d in items))
        for group in groups:
            st.caption(f"**{group}**")
            members = [d for d in items if d.group == group]
            # Charts come in pairs (PNG, SVG): one row each, so the menu stays short.
            per_row = 2 if group == "Charts" else 1
            for start in range(0, len(members), per_row):
                cells = st.columns(per_row, gap="small") if per_row > 1 else [st.container()]
                for cell, d in zip(cells, members[start : start + per_row], strict=False):
                    cell.download_button(
                        d.label,
                        data=d.make,
                        file_name=d.file_name,
                        mime=d.mime,
                        key=f"{key_prefix}_{d.file_name}",
                        on_click="ignore",
                        disabled=bool(problem) and d.needs_browser,
                        help=d.file_name,
                        width="stretch",
                    )
        if matrix is None:
            st.caption("No matrix to download: this mechanism has none here.")
        st.caption(f"Map data {panda.OSM_ATTRIBUTION}.")
