"""The sidebar's two other ways to choose the road network: a place name, and an OpenStreetMap file.

* **Place name**: a text field and *Find* look the name up (panda.network.geocode_bbox, osmnx's
  Nominatim geocoder); the place's box is drawn with its size before anything is downloaded, and
  *Download roads* then takes the bounding box's download path (``network_controls._download``).
* **OSM file**: an upload (.osm, .osm.bz2, .osm.gz, .osm.pbf, at most 50 MB) is read by
  panda.network.network_from_upload (bounded: size, decompressed size, what the reader reads) in a job on
  a worker process (``panda.jobs.upload_network_job``, under the worker's memory and time limits): the web
  server only hashes the bytes, sends them and keeps the network in the upload cache. The network's
  source string is ``file:<first 16 hex digits of the file's sha256>``, which app.state.network loads
  again from the upload cache (so the view's link keeps it while the server keeps the file).

A failure is a sentence in the sidebar (``net_error``); the network shown before stays active. Names that come
from outside (an uploaded file's name, the geocoder's name of a place, the exception texts that quote them) are
shown as plain text (:func:`app.model.messages.plain`): a file named ``[click](http://...)`` is no link.
:func:`preview_deck` is pure (no ``st.*``): the place's box as a pydeck map without a basemap.

**Downloads** (:func:`download`, every *Download* button's path) run as jobs on the executor's worker
processes (:func:`panda.download_jobs.download_bbox`: one lock per box, a few at a time, a time and a
memory limit); the web server never downloads itself (``panda.network.download.IN_PROCESS_DOWNLOADS`` is off
in a running server). **A link never downloads**: a link's box that is not in the download cache
(:func:`check_source`) leaves the embedded city on the map, and the page shows the box, its size and a
button *Download this area (≈ N km²)* (:func:`show_pending_box`); a box in the cache opens at once. Until
the box is downloaded or another network chosen, the page's URL keeps the link's box
(:func:`pending_link_source`): a reload shows the same panel.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pydeck as pdk
import streamlit as st

import panda
from app import state
from app.model.messages import looks_technical, plain, plain_error
from app.model.params import bbox_source, parse_source
from panda import download_jobs, upload_jobs
from panda.network import MAX_BBOX_AREA_KM2, MAX_QUERY_CHARS, MAX_UPLOAD_BYTES, UPLOAD_SUFFIXES
from panda.network.uploads import UPLOAD_SIZE_MB

__all__ = [
    "SOURCE_PLACE",
    "SOURCE_FILE",
    "controls",
    "preview_deck",
    "place_failure",
    "upload_failure",
    "download",
    "download_failure",
    "check_source",
    "pending_link_source",
    "show_pending_box",
    "box_just_downloaded",
    "remember_opened",
    "area_label",
]

if st.runtime.exists():  # a running web server: it never downloads itself (downloads are worker jobs)
    panda.network.download.IN_PROCESS_DOWNLOADS = False  # the module whose functions read it

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
    # The library's sentences quote the place's name as the geocoder gave it: text, never markup.
    said, details = plain_error(exc)
    if isinstance(exc, ValueError):
        return f"**This place cannot be used.** {plain(said)}", details
    return f"**The place-name search failed.** {plain(said)} The map keeps the network it shows.", details


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
    said, details = plain_error(exc)
    if isinstance(exc, ValueError):
        # The library's upload sentences are written for people (they name the file); a parser's own
        # words in parentheses go to the details line. The file's name is the uploader's: text, never markup.
        text = _drop_technical_parens(str(exc))
        details = "" if text == str(exc) else str(exc)
        return f"**This file gives no road network.** {plain(text)} The map keeps the network it shows.", details
    return f"**The file could not be read.** {plain(said)} The map keeps the network it shows.", details


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
    # The geocoder's name (anyone can edit OpenStreetMap's names): shown as text, never markup.
    st.markdown(
        f"**{plain(found['name'])}**: about {bbox.area_km2:,.1f} km² ({width_km:,.1f} km × {height_km:,.1f} km)."
    )
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
        max_upload_size=UPLOAD_SIZE_MB,  # server.maxUploadSize too (.streamlit/config.toml)
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
        with st.spinner(f"Reading {plain(upload.name)} ..."):  # the uploader's file name: text, never markup
            # Read on a worker, as this session's job (its slots, its wait): never parsed in the web server.
            net = panda.network.network_from_upload(
                upload.getvalue(), upload.name, read=upload_jobs.reader(state._run_job)
            )
    except Exception as exc:  # never a traceback; the previous network stays
        ss.net_error, ss.net_error_details = upload_failure(exc)
        return False
    ss.active_source = net.source
    ss.pop("link_notice", None)
    st.success(f"**{plain(net.name)}**: {net.n_nodes:,} nodes, {net.n_edges:,} road segments.")
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


# --------------------------------------------------------------------------------------------
# Bounding-box downloads: only a click starts one, on a worker process
# --------------------------------------------------------------------------------------------


def area_label(area_km2: float) -> str:
    """An area for a person: ``0.72 km²``, ``5.5 km²``, ``2,330 km²``."""
    if area_km2 < 1:
        return f"{area_km2:.2f} km²"
    return f"{area_km2:,.1f} km²" if area_km2 < 100 else f"{area_km2:,.0f} km²"


def _embedded_hint() -> str:
    return ", ".join(panda.list_cities())


def download_failure(exc: BaseException) -> tuple[str, str]:
    """``(message, details)`` for a road network that could not be downloaded."""
    said, details = plain_error(exc)
    said = plain(said)  # may quote the OpenStreetMap server's answer: text, never markup
    if isinstance(exc, download_jobs.DownloadBusy):
        return f"**Not now: {exc}**", ""
    if isinstance(exc, panda.OfflineError):
        head = "**No connection to the OpenStreetMap server:** live downloads do not work from here."
    elif isinstance(exc, panda.DownloadError):
        head = f"**The download failed.** {said}"
    elif isinstance(exc, ValueError):
        head = f"**No usable road network in this box.** {said}"
    else:
        head = f"**The download failed.** {said}"
    return f"{head}\n\nThe embedded cities work offline: {_embedded_hint()}.", details


def download(box: tuple[float, float, float, float]) -> None:
    """Download a box (after a click) on a worker; on success make it the active network.

    The box is rounded to the grid (``panda.network.snap_bbox``) first; a failure is ``net_error``.
    """
    ss = st.session_state
    ss.net_error_details = ""
    try:
        bbox = panda.network.snap_bbox(panda.BoundingBox(*box))
    except ValueError as exc:
        ss.net_error = f"**This bounding box is not valid.** {plain_error(exc)[0]}"
        return
    if bbox.area_km2 > MAX_BBOX_AREA_KM2:
        ss.net_error = (
            f"**This bounding box is too large:** about {bbox.area_km2:,.0f} km², the limit is "
            f"{MAX_BBOX_AREA_KM2:,.0f} km² (the paper's Rome box is about 2,330 km²). Choose a smaller area, "
            f"or use an embedded city: {_embedded_hint()}."
        )
        return
    # The progress box lives in a slot: on failure it goes away and the error below is the one message.
    slot = st.empty()
    try:
        with slot.status(
            f"Downloading the road network (about {area_label(bbox.area_km2)}) ...", expanded=True
        ) as status:
            st.write("Asking the OpenStreetMap server; large boxes take minutes.")
            download_jobs.download_bbox(
                *bbox.as_tuple(),
                run=state.panda_worker().run,
                on_wait=lambda: st.write("Someone else is downloading this area right now: waiting for it."),
            )
            net = state.bbox_network(*bbox.as_tuple())  # from the cache file just written
            status.update(label=f"Road network ready: {net.n_nodes:,} nodes", state="complete", expanded=False)
    except Exception as exc:  # never a traceback in the page
        slot.empty()
        ss.net_error, ss.net_error_details = download_failure(exc)
        return
    ss.active_source = bbox_source(bbox.as_tuple())
    remember_opened(ss.active_source)
    ss.net_error = None
    ss.pop("link_notice", None)
    ss.pop("pending_box", None)


def check_source(source: str, fallback: str) -> str:
    """The source to load now: a box in the download cache, or one this session has opened already
    (:func:`remember_opened`: the network stays in memory when another download evicts its file), opens at once
    (as its grid-rounded box); a box neither is kept aside (:func:`show_pending_box`) and ``fallback`` is
    returned. Other sources are returned as they are. Nothing is downloaded.
    """
    try:
        kind, value = parse_source(source)
    except ValueError:
        return source  # loading it says what is wrong
    if kind != "bbox":
        return source
    try:
        bbox = panda.network.snap_bbox(panda.BoundingBox(*value))  # type: ignore[misc]
    except ValueError:
        return source
    snapped = bbox_source(bbox.as_tuple())
    cached = panda.network.is_bbox_cached(*bbox.as_tuple())  # also marks the file recently used
    if cached or snapped in st.session_state.get("opened_boxes", ()):
        return snapped
    st.session_state.pending_box = {"box": bbox.as_tuple(), "source": fallback, "error": None, "details": ""}
    return fallback


def remember_opened(source: str) -> None:
    """Note that this session's page has loaded the network of ``source`` (a box): :func:`check_source` keeps it
    on the page in the later runs even when its download-cache file is gone by then."""
    if source.startswith("bbox:"):
        opened = st.session_state.setdefault("opened_boxes", set())
        opened.add(source)


def box_just_downloaded() -> tuple[float, float, float, float] | None:
    """The box the page's button has just downloaded (once; the next run's controls then show it), or None."""
    return st.session_state.pop("box_downloaded", None)


def pending_link_source() -> str | None:
    """The source string of the link's box while it is pending (not downloaded here, and no other network chosen
    since), else None. The page's URL keeps naming that box meanwhile (``sidebar.write_query``), so a reload
    shows the box and its button again instead of the embedded city put in its place.
    """
    ss = st.session_state
    pending = ss.get("pending_box")
    if not pending or ss.get("active_source") != pending["source"]:
        return None
    return bbox_source(tuple(pending["box"]))


def show_pending_box() -> bool:
    """In the page: the link's box that is not downloaded here, its size, and a button to download it.

    Shown while the map still shows the network put in its place. True when the click downloaded it (the
    caller reruns the page with the new network).
    """
    ss = st.session_state
    pending = ss.get("pending_box")
    if not pending:
        return False
    if ss.active_source != pending["source"]:  # the person has chosen a network since
        del ss["pending_box"]
        return False
    bbox = panda.BoundingBox(*pending["box"])
    w, s, e, n = bbox.as_tuple()
    width_km, height_km = _box_size_km(bbox)
    city = ss.active_source.partition(":")[2]
    shown = panda.CITIES[city][1].split(":")[0] if city in panda.CITIES else city
    size = area_label(bbox.area_km2)
    with st.container(border=True, key="pending_box_panel"):
        st.markdown(
            f"**This link names an area that is not downloaded on this server yet:** west {w:g}°, south {s:g}°, "
            f"east {e:g}°, north {n:g}°, about {size} ({width_km:,.1f} km × {height_km:,.1f} km). "
            f"Nothing is downloaded until you press the button; until then the map shows the embedded city "
            f"{shown}."
        )
        st.pydeck_chart(preview_deck(bbox, "the link's area"), height=220, key="pending_box_preview")
        clicked = False
        if bbox.area_km2 > MAX_BBOX_AREA_KM2:
            st.error(
                f"**This area is too large to download:** about {bbox.area_km2:,.0f} km², the limit is "
                f"{MAX_BBOX_AREA_KM2:,.0f} km². Choose a smaller box in the sidebar, or an embedded city: "
                f"{_embedded_hint()}."
            )
        else:
            clicked = st.button(
                f"Download this area (≈ {size})",
                key="w_pending_download",
                icon=":material/download:",
                type="primary",
                help="Downloads the drivable roads of this box from OpenStreetMap (needs internet; large boxes "
                "take minutes) and caches them on this server.",
            )
        if clicked:
            download(pending["box"])
            if not ss.net_error:
                ss.box_downloaded = tuple(pending["box"])
                return True
            pending["error"], pending["details"] = ss.net_error, ss.net_error_details
            ss.net_error, ss.net_error_details = None, ""
        if pending["error"]:
            st.error(pending["error"])
            if pending["details"]:
                st.caption(f"Details: {plain(pending['details'])}")  # an exception's own words: text
    return False
