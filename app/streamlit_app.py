"""PAnDA Explorer dashboard (entry point of `streamlit run app`)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pydeck as pdk  # noqa: E402
import streamlit as st  # noqa: E402

import panda  # noqa: E402

st.set_page_config(page_title="PAnDA Explorer", layout="wide")
st.title("PAnDA Explorer")


@st.cache_resource
def _network(name: str) -> panda.RoadNetwork:
    return panda.load_city(name)


net = _network(panda.DEFAULT_CITY)
paths = [
    {"path": [[float(net.lon[u]), float(net.lat[u])], [float(net.lon[v]), float(net.lat[v])]]}
    for u, v in zip(net.edge_u, net.edge_v, strict=True)
]
layer = pdk.Layer("PathLayer", paths, get_path="path", get_color=[90, 90, 90], width_min_pixels=1)
view = pdk.ViewState(longitude=float(net.lon.mean()), latitude=float(net.lat.mean()), zoom=12)
st.pydeck_chart(pdk.Deck(layers=[layer], initial_view_state=view, map_provider=None))
st.caption(f"{net.name}: {net.n_nodes:,} nodes, {net.n_edges:,} road segments. {panda.OSM_ATTRIBUTION}")
