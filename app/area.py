"""The sidebar's two other ways to choose the road network: a place name, and an OpenStreetMap file.

* **Place name**: a text field and *Find* look the name up (panda.network.geocode_bbox, osmnx's
  Nominatim geocoder); the place's box is drawn with its size before anything is downloaded, and
  *Download roads* then takes the bounding box's download path (``sidebar._download``).
* **OSM file**: an upload (.osm, .osm.bz2, .osm.gz, .osm.pbf, at most 50 MB) is read by
  panda.network.network_from_upload (bounded: size, decompressed size, road nodes); the network's
  source string is ``file:<first 16 hex digits of the file's sha256>``, which app.state.network loads
  again from the upload cache (so the view's link keeps it while the server keeps the file).

A failure is a sentence in the sidebar (``net_error``); the network shown before stays active.
:func:`preview_deck` is pure (no ``st.*``): the place's box as a pydeck map without a basemap.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pydeck as pdk
import streamlit as st

import panda
from app.messages import looks_technical, plain_error
from panda.network import MAX_BBOX_AREA_KM2, MAX_QUERY_CHARS, MAX_UPLOAD_BYTES, UPLOAD_SUFFIXES

__all__ = ["SOURCE_PLACE", "SOURCE_FILE", "controls", "preview_deck", "place_failure", "upload_failure"]

#: The "Source" radio's options added here (stable values: tests and links rely on them).
SOURCE_PLACE = "Place name (live download)"
SOURCE_FILE = "OSM file (upload)"

_BOX_FILL = [31, 119, 180, 60]
_BOX_LINE = [31, 119, 180, 255]


def _embedded() -> str:
    return ", ".join(panda.list_cities())


def place_failure(exc: BaseException) -> tuple[str, str]:
    """``(message, details)`` for a place name that could not be found."""
    if isinstance(exc, panda.OfflineError):
        return (
            "**No connection to the place-name search:** finding an area by its name does not work from here. "
            "Type the area's box under *Bounding box*, upload an OpenStreetMap extract under *OSM file*, or pick "
            f"an embedded city, which needs no connection: {_embedded()}. The map keeps the network it shows.",
            str(exc),
        )
    plain, details = plain_error(exc)
    if isinstance(exc, ValueError):
        return f"**This place cannot be used.** {plain}", details
    return f"**The place-name search failed.** {plain} The map keeps the network it shows.", details


def _drop_technical_parens(text: str) -> str:
    """``text`` without its parenthesised parts that name code (a parser's message: "(PBF error: ...)")."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                out.append(text[start:i])
                start = i
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                part = text[start : i + 1]
                if not looks_technical(part):
                    out.append(part)
                start = i + 1
    out.append(text[start:])
    return " ".join("".join(out).split()).replace(" :", ":").replace(" .", ".")


def upload_failure(exc: BaseException) -> tuple[str, str]:
    """``(message, details)`` for an uploaded file that gave no road network."""
    plain, details = plain_error(exc)
    if isinstance(exc, ValueError):
        # The library's upload sentences are written for people (they name the file); a parser's own
        # words in parentheses go to the details line.
        text = _drop_technical_parens(str(exc))
        details = "" if text == str(exc) else str(exc)
        return f"**This file gives no road network.** {text} The map keeps the network it shows.", details
    return f"**The file could not be read.** {plain} The map keeps the network it shows.", details


def _box_size_km(bbox: panda.BoundingBox) -> tuple[float, float]:
    w, s, e, n = bbox.as_tuple()
    mid_lat = (s + n) / 2.0
    width = float(panda.network.haversine_km(w, mid_lat, e, mid_lat))
    height = float(panda.network.haversine_km(w, s, w, n))
    return width, height


def _lonlat(lon: float, lat: float) -> str:
    # ASCII only: deck.gl's TextLayer draws no degree sign with its default character set.
    return f"{abs(lon):.3f} {'E' if lon >= 0 else 'W'}, {abs(lat):.3f} {'N' if lat >= 0 else 'S'}"


def preview_deck(bbox: panda.BoundingBox, name: str) -> pdk.Deck:
    """The place's box on a map without a basemap (no request to a tile server), its name inside."""
    w, s, e, n = bbox.as_tuple()
    ring = [[w, s], [e, s], [e, n], [w, n], [w, s]]
    width_km, height_km = _box_size_km(bbox)
    box = pdk.Layer(
        "PolygonLayer",
        data=[{"polygon": ring, "name": name, "size": f"{width_km:,.1f} km × {height_km:,.1f} km"}],
        get_polygon="polygon",
        get_fill_color=_BOX_FILL,
        get_line_color=_BOX_LINE,
        line_width_min_pixels=2,
        stroked=True,
        filled=True,
        pickable=True,
    )
    corners = [
        {"position": [w, s], "text": _lonlat(w, s), "anchor": "start", "baseline": "top"},
        {"position": [e, n], "text": _lonlat(e, n), "anchor": "end", "baseline": "bottom"},
    ]
    labels = pdk.Layer(
        "TextLayer",
        data=[
            {
                "position": [(w + e) / 2, (s + n) / 2],
                "text": name.split(",")[0][:40],
                "anchor": "middle",
                "baseline": "center",
            },
            *corners,
        ],
        get_position="position",
        get_text="text",
        get_size=13,
        get_color=[20, 20, 20, 255],
        get_text_anchor="anchor",
        get_alignment_baseline="baseline",
    )
    # Fit the box with a margin: the zoom at which its larger side spans about 60 % of a 200 px sidebar
    # chart (deck.gl's Web Mercator world is 512 px wide at zoom 0).
    span_deg = max(e - w, (n - s) / max(math.cos(math.radians((s + n) / 2)), 0.05))
    zoom = max(0.0, min(16.0, math.log2(200 * 0.6 * 360 / (512 * max(span_deg, 1e-6)))))
    view = pdk.ViewState(longitude=(w + e) / 2, latitude=(s + n) / 2, zoom=zoom)
    return pdk.Deck(
        layers=[box, labels],
        initial_view_state=view,
        map_provider=None,
        tooltip={"text": "{name}\n{size}"},
    )


def _find(query: str) -> None:
    ss = st.session_state
    ss.net_error, ss.net_error_details = None, ""
    try:
        with st.spinner("Looking the name up ..."):
            bbox, name = panda.network.geocode_bbox(query)
    except Exception as exc:  # never a traceback in the page; the previous network stays
        ss.net_error, ss.net_error_details = place_failure(exc)
        return
    ss.place_found = {"query": query, "bbox": bbox.as_tuple(), "name": name}


def _place_controls(download: Callable[[tuple[float, float, float, float]], None]) -> bool:
    """The place-name controls; True when a download made a new network active."""
    ss = st.session_state
    st.text_input(
        "Place name",
        key="w_place",
        max_chars=MAX_QUERY_CHARS,
        placeholder="e.g. Kotka, Finland",
        help="A town, district or area; the search (OpenStreetMap's Nominatim) needs internet. Its box is shown "
        "before anything is downloaded.",
    )
    if st.button("Find", key="w_place_find", icon=":material/search:", help="Look the name up (no roads yet)."):
        if not ss.w_place.strip():
            ss.net_error, ss.net_error_details = "**Type a place name first**, for example *Kotka, Finland*.", ""
        else:
            _find(ss.w_place)
    found = ss.get("place_found")
    if not found:
        return False
    bbox = panda.BoundingBox(*found["bbox"])
    width_km, height_km = _box_size_km(bbox)
    st.markdown(f"**{found['name']}**: about {bbox.area_km2:,.1f} km² ({width_km:,.1f} km × {height_km:,.1f} km).")
    st.pydeck_chart(preview_deck(bbox, found["name"]), height=220, key="place_preview")
    if bbox.area_km2 > MAX_BBOX_AREA_KM2:  # geocode_bbox refuses these; kept for a stale session value
        return False
    if st.button(
        "Download roads",
        key="w_place_download",
        icon=":material/download:",
        help="Downloads the drivable roads of this box from OpenStreetMap (cached on disk for next time).",
    ):
        download(bbox.as_tuple())
        return not ss.net_error
    return False


def _file_controls() -> bool:
    """The upload controls; True when an upload made a new network active."""
    ss = st.session_state
    upload = st.file_uploader(
        "OpenStreetMap extract",
        type=[".osm", ".bz2", ".gz", ".pbf"],
        key="w_upload",
        max_upload_size=MAX_UPLOAD_BYTES // 1_000_000,
        help=f"An extract of your area ({', '.join(UPLOAD_SUFFIXES)}, at most {MAX_UPLOAD_BYTES / 1e6:,.0f} MB), "
        "for example from a regional download site or JOSM. Its drivable roads become the network; the file "
        "stays on this server for a while, so the page's link shows it again.",
    )
    if upload is None:
        return False
    if ss.get("upload_done") == upload.file_id:  # already read in an earlier run
        return False
    ss.upload_done = upload.file_id
    ss.net_error, ss.net_error_details = None, ""
    try:
        with st.spinner(f"Reading {upload.name} ..."):
            net = panda.network.network_from_upload(upload.getvalue(), upload.name)
    except Exception as exc:  # never a traceback; the previous network stays
        ss.net_error, ss.net_error_details = upload_failure(exc)
        return False
    ss.active_source = net.source
    ss.pop("link_notice", None)
    st.success(f"**{net.name}**: {net.n_nodes:,} nodes, {net.n_edges:,} road segments.")
    return True


def controls(kind: str, download: Callable[[tuple[float, float, float, float]], None]) -> bool:
    """Draw the controls of ``kind`` (:data:`SOURCE_PLACE` or :data:`SOURCE_FILE`).

    ``download(box)`` is the sidebar's bounding-box download (it sets ``active_source`` or
    ``net_error``). Returns True when the active network changed in this run (the caller loads it).
    """
    if kind == SOURCE_PLACE:
        return _place_controls(download)
    if kind == SOURCE_FILE:
        return _file_controls()
    msg = f"The 'kind' parameter of controls must be {SOURCE_PLACE!r} or {SOURCE_FILE!r}. Got {kind!r} instead."
    raise ValueError(msg)
