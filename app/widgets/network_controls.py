"""The sidebar's road network: an embedded city, a bounding box, a place name or an uploaded OSM file.

A link's network that cannot be loaded here is replaced by the default embedded city, and the page says so
(:func:`show_link_notice`). Exception texts (they quote uploaded files' and places' names) are shown as plain text
(:func:`app.model.messages.plain`), never as markup.
"""

from __future__ import annotations

import streamlit as st

import panda
from app import state
from app.model.messages import plain, plain_error
from app.model.params import BBOX_PRESETS
from app.widgets import area_picker

__all__ = ["render", "show_link_notice", "SOURCE_CITY", "SOURCE_BBOX", "CUSTOM_BOX"]

SOURCE_CITY = "Embedded city (offline)"
SOURCE_BBOX = "Bounding box (live download)"
CUSTOM_BOX = "Custom box"


def _box_inputs() -> None:
    """The bounding box's four edges, degrees (WGS84)."""
    c1, c2 = st.columns(2)
    c1.number_input(
        "West (lon °)",
        -180.0,
        180.0,
        key="w_west",
        format="%.4f",
        persist_state="session",
        help="Western edge, degrees of longitude.",
    )
    c2.number_input(
        "East (lon °)",
        -180.0,
        180.0,
        key="w_east",
        format="%.4f",
        persist_state="session",
        help="Eastern edge, degrees of longitude.",
    )
    c1.number_input(
        "South (lat °)",
        -90.0,
        90.0,
        key="w_south",
        format="%.4f",
        persist_state="session",
        help="Southern edge, degrees of latitude.",
    )
    c2.number_input(
        "North (lat °)",
        -90.0,
        90.0,
        key="w_north",
        format="%.4f",
        persist_state="session",
        help="Northern edge, degrees of latitude.",
    )


def _on_box_preset_change() -> None:
    box = BBOX_PRESETS.get(st.session_state.w_box_preset)
    if box:
        st.session_state.w_west, st.session_state.w_south, st.session_state.w_east, st.session_state.w_north = box


def _download(box: tuple[float, float, float, float]) -> None:
    """Download a bounding box on a worker (``app.widgets.area_picker.download``); on success make it active."""
    area_picker.download(box)


def _city_label(name: str) -> str:
    return panda.CITIES[name][1].split(":")[0] if name in panda.CITIES else "Rome (the paper's network)"


def _active_network() -> panda.RoadNetwork:
    """The active road network. One that cannot be loaded here (a link's bounding box, offline) is
    replaced by the default embedded city, and the source controls are set to show that city: this
    runs before they are drawn. The page then says what happened (:func:`show_link_notice`)."""
    ss = st.session_state
    fallback = f"city:{panda.DEFAULT_CITY}"
    # A link's box not downloaded here is not downloaded by the link: the page shows it with a button.
    asked = ss.active_source
    ss.active_source = source = area_picker.check_source(asked, fallback)
    if source != asked and source == fallback:  # the controls show what the map shows
        ss.w_source_kind, ss.w_city, ss.net_error = SOURCE_CITY, panda.DEFAULT_CITY, None
    try:
        with st.spinner("Loading the road network ..."):  # shown only if it takes more than 0.5 s
            net = state.network(source)
        area_picker.remember_opened(source)  # the next runs keep it, whatever becomes of its cache file
        return net
    except Exception as exc:  # never a traceback: fall back to the embedded city, say so in the page
        fallback = f"city:{panda.DEFAULT_CITY}"
        reason, details = plain_error(exc)
        if source.startswith("bbox:"):
            w, s_, e, n = source.partition(":")[2].split(",")
            what = f"The bounding box of this link (west {w}, south {s_}, east {e}, north {n})"
            retry = (
                " To try it again, choose *Bounding box* under *Road network* in the sidebar (the link's box is "
                "filled in) and press *Download*."
            )
        elif source.startswith("file:"):
            what = f"The uploaded road network of this link ({source.partition(':')[2]})"
            retry = " To use it, upload the file again: *Road network*, *OSM file* in the sidebar."
        else:
            what, retry = "The road network of this link", ""
        ss.link_notice = {
            "text": f"**{what} could not be loaded.** {plain(reason)} **The map shows the embedded city "
            f"{_city_label(panda.DEFAULT_CITY)} instead.**{retry}",
            "details": details,
            "source": fallback,
        }
        ss.w_source_kind, ss.w_city, ss.active_source, ss.net_error = SOURCE_CITY, panda.DEFAULT_CITY, fallback, None
        return state.network(fallback)


def show_link_notice() -> None:
    """In the page (not only the sidebar): the link's network was replaced, while that is still so."""
    ss = st.session_state
    notice = ss.get("link_notice")
    if not notice:
        return
    if ss.active_source != notice["source"]:  # the person has chosen a network since
        del ss["link_notice"]
        return
    st.warning(notice["text"], icon=":material/link_off:")
    if notice["details"]:
        st.caption(f"Details: {plain(notice['details'])}")


def render() -> panda.RoadNetwork:
    """The sidebar's *Road network* controls; returns the active network."""
    ss = st.session_state
    box = area_picker.box_just_downloaded()
    if box is not None:  # the page's button downloaded the link's box: the controls show it
        ss.w_source_kind = SOURCE_BBOX
        ss.w_box_preset = next((k for k, v in BBOX_PRESETS.items() if v == box), CUSTOM_BOX)
        ss.w_west, ss.w_south, ss.w_east, ss.w_north = box
    if ss.w_source_kind == SOURCE_CITY:
        ss.active_source = f"city:{ss.w_city}"
        ss.net_error = None
    net = _active_network()
    st.header("Road network")
    kind = st.radio(
        "Source",
        [SOURCE_CITY, SOURCE_BBOX, area_picker.SOURCE_PLACE, area_picker.SOURCE_FILE],
        key="w_source_kind",
        help="An embedded city loads instantly and needs no connection. A bounding box is downloaded "
        "live from OpenStreetMap (needs internet) and cached on disk for next time. A place name is looked "
        "up first (needs internet), then its box is downloaded. An OSM file is an extract you upload.",
    )
    if kind == SOURCE_CITY:
        st.selectbox(
            "City",
            panda.list_cities(),
            key="w_city",
            persist_state="session",
            format_func=_city_label,
            help="Road networks shipped with the project (OpenStreetMap extracts): "
            + "; ".join(f"**{k}**: {v[1]}" for k, v in panda.CITIES.items()),
        )
    elif kind in (area_picker.SOURCE_PLACE, area_picker.SOURCE_FILE):
        if area_picker.controls(kind, _download):
            net = state.network(ss.active_source)  # just downloaded or uploaded: cached
    else:
        st.selectbox(
            "Area",
            [*BBOX_PRESETS, CUSTOM_BOX],
            key="w_box_preset",
            persist_state="session",
            on_change=_on_box_preset_change,
            help="The paper's three cities, or your own box (degrees, WGS84).",
        )
        _box_inputs()
        if st.button(
            "Download road network",
            icon=":material/download:",
            help="Downloads the drivable roads of the box from OpenStreetMap.",
        ):
            _download((ss.w_west, ss.w_south, ss.w_east, ss.w_north))
            if not ss.net_error:
                net = state.network(ss.active_source)  # just downloaded: cached
        if ss.active_source.startswith("city:") and not ss.net_error:
            st.caption(
                f"Press *Download* to use this box; until then the map shows the embedded city "
                f"{_city_label(ss.active_source.partition(':')[2])}."
            )
    if ss.net_error:
        st.error(ss.net_error)
        if ss.get("net_error_details"):
            st.caption(f"Details: {plain(ss.net_error_details)}")  # an exception's own words: text, never markup
    return net
