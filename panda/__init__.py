"""PAnDA: anchor-based metric differential privacy for geo-locations (CCS 2025), faithfully and fast."""

from panda.errors import DataUnavailableError, DownloadError, OfflineError, PandaError, PandaWarning
from panda.instance import Instance, make_instance
from panda.network import (
    CITIES,
    DEFAULT_CITY,
    OSM_ATTRIBUTION,
    BoundingBox,
    RoadNetwork,
    list_cities,
    load_city,
    network_from_bbox,
    network_from_file,
)

__all__ = [
    "CITIES",
    "DEFAULT_CITY",
    "OSM_ATTRIBUTION",
    "BoundingBox",
    "DataUnavailableError",
    "DownloadError",
    "Instance",
    "OfflineError",
    "PandaError",
    "PandaWarning",
    "RoadNetwork",
    "list_cities",
    "load_city",
    "make_instance",
    "network_from_bbox",
    "network_from_file",
]
__version__ = "0.1.0"
