"""PAnDA: anchor-based metric differential privacy for geo-locations (CCS 2025), faithfully and fast."""

from panda.accounting import phase1_cost
from panda.anchors import SelectionModel, sample_anchor_sets, selection_probabilities, surrogates
from panda.config import PandaConfig, preset
from panda.errors import DataUnavailableError, DownloadError, OfflineError, PandaError, PandaWarning
from panda.gis import PointLayer, places_geojson, places_geopackage
from panda.instance import Instance, make_instance
from panda.margins import margin_for_records, safety_margins, surrogate_probabilities
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
from panda.pipeline import PandaResult, run_panda
from panda.place_names import place_names
from panda.pmdp import PmdpAudit, audit_panda
from panda.priors import (
    Places,
    SnapResult,
    list_poi_cities,
    load_pois,
    parse_places_csv,
    parse_places_file,
    poi_weights,
    road_density_weights,
    snap_places,
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
    "PandaConfig",
    "PmdpAudit",
    "Places",
    "SnapResult",
    "list_poi_cities",
    "load_pois",
    "parse_places_csv",
    "parse_places_file",
    "place_names",
    "places_geojson",
    "places_geopackage",
    "PointLayer",
    "poi_weights",
    "road_density_weights",
    "snap_places",
    "audit_panda",
    "compare",
    "audit_mechanism",
    "adversary_error_m",
    "attacker_error_vs_k",
    "posterior_after",
    "RepeatedReports",
    "PandaResult",
    "SelectionModel",
    "margin_for_records",
    "phase1_cost",
    "preset",
    "run_panda",
    "safety_margins",
    "sample_anchor_sets",
    "selection_probabilities",
    "surrogate_probabilities",
    "surrogates",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    # compare and the audit pull in every mechanism: import them on first use.
    if name == "compare":
        from panda.compare import compare

        return compare
    if name in ("audit_mechanism", "adversary_error_m"):
        from panda import audit

        return getattr(audit, name)
    if name in ("attacker_error_vs_k", "posterior_after", "RepeatedReports"):
        from panda import repeated

        return getattr(repeated, name)
    raise AttributeError(f"module 'panda' has no attribute {name!r}")
