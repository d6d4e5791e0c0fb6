"""Road networks: embedded cities, files a user has, and live OpenStreetMap downloads.

A :class:`RoadNetwork` is a plain, read-only value: node coordinates, directed edges with their
length in metres, and where the data came from. Every network is reduced to its largest strongly
connected component, so that every shortest-path distance between two of its nodes is finite.

One module per job, each importing only the ones listed before it:

* :mod:`~panda.network.roads`: :class:`RoadNetwork`, :class:`BoundingBox`, :func:`haversine_km`, and the
  conversion of an osmnx/networkx graph (:func:`network_from_graph`);
* :mod:`~panda.network.folders`: the embedded data's folder (:data:`DATA_DIR`) and the cache folders
  (:data:`CACHE_DIR`);
* :mod:`~panda.network.cache`: networks on disk (.npz) and the download cache, its bound and eviction;
* :mod:`~panda.network.files`: OSM XML, OSM PBF and GraphML files (:func:`network_from_file`, pyosmium);
* :mod:`~panda.network.uploads`: uploaded files, bounded, and their cache (:func:`network_from_upload`);
* :mod:`~panda.network.cities`: the embedded cities and the paper's Rome network (:func:`load_city`);
* :mod:`~panda.network.download`: live downloads through osmnx and Overpass (:func:`network_from_bbox`) and
  the connection probe;
* :mod:`~panda.network.geocode`: place names through osmnx's Nominatim geocoder (:func:`geocode_bbox`).

This package re-exports their names, as ``panda.network`` had them when it was one module.
"""

from panda.errors import DataUnavailableError as DataUnavailableError
from panda.errors import DownloadError as DownloadError
from panda.errors import OfflineError as OfflineError
from panda.errors import PandaWarning as PandaWarning
from panda.network import cache as cache
from panda.network import cities as cities
from panda.network import download as download
from panda.network import files as files
from panda.network import folders as folders
from panda.network import geocode as geocode
from panda.network import roads as roads
from panda.network import uploads as uploads
from panda.network.cache import BBOX_GRID_DEG as BBOX_GRID_DEG
from panda.network.cache import DEFAULT_DOWNLOAD_CACHE_MB as DEFAULT_DOWNLOAD_CACHE_MB
from panda.network.cache import DOWNLOAD_CACHE_FOLDERS as DOWNLOAD_CACHE_FOLDERS
from panda.network.cache import DOWNLOAD_CACHE_MB_ENV as DOWNLOAD_CACHE_MB_ENV
from panda.network.cache import _cache_name as _cache_name
from panda.network.cache import _load_network_npz as _load_network_npz
from panda.network.cache import _read_cached as _read_cached
from panda.network.cache import _save_network_npz as _save_network_npz
from panda.network.cache import bbox_cache_file as bbox_cache_file
from panda.network.cache import cached_bbox_network as cached_bbox_network
from panda.network.cache import download_cache_max_bytes as download_cache_max_bytes
from panda.network.cache import evict_download_cache as evict_download_cache
from panda.network.cache import is_bbox_cached as is_bbox_cached
from panda.network.cache import snap_bbox as snap_bbox
from panda.network.cities import _ROME_DEFAULT_DIR as _ROME_DEFAULT_DIR
from panda.network.cities import CITIES as CITIES
from panda.network.cities import DEFAULT_CITY as DEFAULT_CITY
from panda.network.cities import ROME_PAPER as ROME_PAPER
from panda.network.cities import _load_embedded as _load_embedded
from panda.network.cities import _load_rome as _load_rome
from panda.network.cities import _rome_dir as _rome_dir
from panda.network.cities import list_cities as list_cities
from panda.network.cities import load_city as load_city
from panda.network.download import _DOWNLOAD_LOCK as _DOWNLOAD_LOCK
from panda.network.download import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from panda.network.download import IN_PROCESS_DOWNLOADS as IN_PROCESS_DOWNLOADS
from panda.network.download import MAX_BBOX_AREA_KM2 as MAX_BBOX_AREA_KM2
from panda.network.download import PROBE_TIMEOUT_S as PROBE_TIMEOUT_S
from panda.network.download import _check_download_args as _check_download_args
from panda.network.download import _probe_overpass as _probe_overpass
from panda.network.download import download_network as download_network
from panda.network.download import network_from_bbox as network_from_bbox
from panda.network.files import _osm_elements as _osm_elements
from panda.network.files import _way_filter as _way_filter
from panda.network.files import _way_passes as _way_passes
from panda.network.files import network_from_file as network_from_file
from panda.network.folders import CACHE_DIR as CACHE_DIR
from panda.network.folders import CACHE_DIR_ENV as CACHE_DIR_ENV
from panda.network.folders import CITIES_CACHE_DIR as CITIES_CACHE_DIR
from panda.network.folders import DATA_DIR as DATA_DIR
from panda.network.folders import IN_CHECKOUT as IN_CHECKOUT
from panda.network.folders import _cache_root as _cache_root
from panda.network.geocode import GEOCODE_TIMEOUT_S as GEOCODE_TIMEOUT_S
from panda.network.geocode import MAX_QUERY_CHARS as MAX_QUERY_CHARS
from panda.network.geocode import geocode_bbox as geocode_bbox
from panda.network.roads import EARTH_RADIUS_KM as EARTH_RADIUS_KM
from panda.network.roads import NETWORK_TYPES as NETWORK_TYPES
from panda.network.roads import OSM_ATTRIBUTION as OSM_ATTRIBUTION
from panda.network.roads import BoundingBox as BoundingBox
from panda.network.roads import RoadNetwork as RoadNetwork
from panda.network.roads import _adjacency as _adjacency
from panda.network.roads import haversine_km as haversine_km
from panda.network.roads import network_from_graph as network_from_graph
from panda.network.uploads import MAX_UPLOAD_BYTES as MAX_UPLOAD_BYTES
from panda.network.uploads import MAX_UPLOAD_DECOMPRESSED_BYTES as MAX_UPLOAD_DECOMPRESSED_BYTES
from panda.network.uploads import MAX_UPLOAD_NODES as MAX_UPLOAD_NODES
from panda.network.uploads import UPLOAD_CACHE_MAX_BYTES as UPLOAD_CACHE_MAX_BYTES
from panda.network.uploads import UPLOAD_CACHE_MAX_FILES as UPLOAD_CACHE_MAX_FILES
from panda.network.uploads import UPLOAD_SUFFIXES as UPLOAD_SUFFIXES
from panda.network.uploads import _decompress_capped as _decompress_capped
from panda.network.uploads import load_upload as load_upload
from panda.network.uploads import network_from_upload as network_from_upload

__all__ = [
    "BoundingBox",
    "RoadNetwork",
    "CITIES",
    "DEFAULT_CITY",
    "OSM_ATTRIBUTION",
    "NETWORK_TYPES",
    "MAX_BBOX_AREA_KM2",
    "list_cities",
    "load_city",
    "network_from_bbox",
    "network_from_graph",
    "network_from_file",
    "network_from_upload",
    "load_upload",
    "geocode_bbox",
    "snap_bbox",
    "BBOX_GRID_DEG",
    "cached_bbox_network",
    "is_bbox_cached",
    "evict_download_cache",
    "download_cache_max_bytes",
    "UPLOAD_SUFFIXES",
    "MAX_UPLOAD_BYTES",
    "MAX_UPLOAD_DECOMPRESSED_BYTES",
    "MAX_UPLOAD_NODES",
    "haversine_km",
]
