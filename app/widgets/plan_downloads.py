"""The planner's "Take it with you" row: the places as GeoPackage and GeoJSON, and the brief as HTML and PDF.

Each file is made only when its button is clicked (``st.download_button(data=callable)``, on a worker thread; the
click does not rerun the page). The brief's pictures are drawn by kaleido in the shared headless Chromium and its
PDF printed by a Chromium of its own (:mod:`app.model.pdf_print`); where they cannot be, the brief says so in a
sentence in their place, and the PDF button's failure is Streamlit's sentence under it.
"""

from __future__ import annotations

import datetime
import os
import urllib.parse

import streamlit as st

import panda
from app.figures.plan_charts import exposure_colors, plan_figure
from app.figures.static_map import static_exposure_map
from app.model.export_files import ExportError, figure_image
from app.model.params import PRIOR_OPTIONS, Params, parse_source
from app.model.pdf_print import html_to_pdf
from app.model.plan_brief import BriefView, brief_html
from app.model.plan_files import plan_geojson, plan_geopackage
from app.model.plan_numbers import worst_off
from panda.plan import PlanResult

__all__ = ["PUBLIC_URL_ENV", "page_link", "plan_downloads"]

#: The address students and readers open (behind a proxy the server cannot see it): as the class round's.
PUBLIC_URL_ENV = "PANDA_PUBLIC_URL"


def page_link(path: str = "plan") -> str:
    """This page's address with its link's query (the view and the question): what reopens it."""
    base = os.environ.get(PUBLIC_URL_ENV, "").strip()
    if not base:
        parts = urllib.parse.urlsplit(st.context.url or "http://localhost:8501/plan")
        base = f"{parts.scheme}://{parts.netloc}{parts.path.rsplit('/', 1)[0]}"
    query = urllib.parse.urlencode(st.query_params.to_dict())
    return f"{base.rstrip('/')}/{path}" + (f"?{query}" if query else "")


def place_name(source: str, fallback: str) -> str:
    """The map's name as the sidebar says it ("Neubrandenburg, DE" for an embedded city), else the network's."""
    kind, value = parse_source(source)
    return panda.CITIES[value][1].split(":")[0] if kind == "city" and value in panda.CITIES else fallback


def _svg(fig, width: int, height: int) -> str:  # noqa: ANN001
    try:
        return figure_image(fig, "svg", width_px=width, height_px=height).decode("utf-8")
    except ExportError as exc:
        return f"<p><i>{exc}</i></p>"


def _brief(result: PlanResult, inst: panda.Instance, params: Params, segments: list[dict], mapped: str, link: str):  # noqa: ANN202
    plan = result.of(mapped)
    colors = exposure_colors(plan)
    prior = PRIOR_OPTIONS.get(params.prior, "uploaded places (their weights)").split(":")[0]
    view = BriefView(
        date=datetime.date.today().isoformat(),
        place_name=place_name(params.source, inst.network.name),
        attribution=inst.network.attribution,
        n_places=inst.n_records,
        n_outputs=inst.n_outputs,
        prior_words=prior,
        mapped=mapped,
        map_svg=_svg(static_exposure_map(inst, segments, colors, worst_off(plan, inst.prior)), 420, 380),
        chart_svg=_svg(plan_figure(result, height=380), 440, 380),
        link=link,
    )
    return brief_html(result, view)


def plan_downloads(
    result: PlanResult,
    inst: panda.Instance,
    params: Params,
    labels: tuple[str, ...],
    segments: list[dict],
    mapped: str,
) -> None:
    """The four download buttons of a plan whose mechanism ``mapped`` is on the exposure map."""
    stem = f"panda-plan-{int(result.target_loss_m)}m"
    link = page_link()
    files = (
        (
            "Brief (PDF)",
            lambda: html_to_pdf(_brief(result, inst, params, segments, mapped, link)),
            "pdf",
            "application/pdf",
            "One page to forward: the question, the answer, the risk, the assumptions, the audit, the map, the chart "
            "and the link (with its QR code).",
        ),
        (
            "Brief (HTML)",
            lambda: _brief(result, inst, params, segments, mapped, link).encode("utf-8"),
            "html",
            "text/html",
            "The same brief as one self-contained web page.",
        ),
        (
            "Places (GeoPackage)",
            lambda: plan_geopackage(result, inst, labels, mapped),
            "gpkg",
            "application/geopackage+sqlite3",
            "Layers 'places' (every place with its errors and risks per mechanism) and 'exposure' (the worst-off "
            "places of the mapped mechanism); WGS84 (EPSG:4326).",
        ),
        (
            "Places (GeoJSON)",
            lambda: plan_geojson(result, inst, labels),
            "geojson",
            "application/geo+json",
            "Every place with its errors and risks per mechanism; WGS84 (CRS84).",
        ),
    )
    for cell, (label, make, suffix, mime, help_text) in zip(st.columns(len(files)), files, strict=True):
        cell.download_button(
            label,
            data=make,
            file_name=f"{stem}.{suffix}",
            mime=mime,
            key=f"plan_{suffix}",
            on_click="ignore",
            help=help_text,
        )
