"""The planner's downloads for GIS tools: the places with their errors and risks as a GeoPackage and as GeoJSON.

Through :mod:`panda.gis` (pyogrio, WGS84 with its CRS written). Layers of the GeoPackage:

* ``places``: every place with its label, the prior and, per planned mechanism, the report's and the attacker's
  expected error at the planned eps (metres) and whether it is among the worst-off 10 %
  (:func:`app.model.plan_numbers.place_columns`);
* ``exposure``: the worst-off places of the mapped mechanism (the exposure map's ringed places), with their errors.

The per-mechanism answer (eps, mean errors, risks) is the page's table and the brief's; the files carry the
per-place numbers. The GeoJSON holds the ``places`` layer only (GeoJSON has one layer).
"""

from __future__ import annotations

import numpy as np

import panda
from app.model.plan_numbers import place_columns, worst_off
from panda.gis import PointLayer, places_geojson, places_geopackage
from panda.plan import PlanResult

__all__ = ["places_table", "plan_geopackage", "plan_geojson"]


def places_table(result: PlanResult, instance: panda.Instance, labels: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The ``places`` layer's columns: the place's number and label, then :func:`place_columns`."""
    cols: dict[str, np.ndarray] = {
        "place": np.arange(instance.n_records, dtype=np.int32),
        "label": np.asarray(labels, dtype=object),
    }
    return cols | place_columns(result, instance.prior)


def plan_geopackage(result: PlanResult, instance: panda.Instance, labels: tuple[str, ...], mapped: str) -> bytes:
    """The GeoPackage: layer ``places`` (every place) and ``exposure`` (the worst-off places under ``mapped``)."""
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    layers = {}
    plan = {m.method: m for m in result.mechanisms}.get(mapped)
    if plan is not None and plan.risk is not None and plan.place_loss_m is not None:
        keep = np.flatnonzero(worst_off(plan, instance.prior))
        layers["exposure"] = PointLayer(
            lon[keep],
            lat[keep],
            {
                "place": keep.astype(np.int32),
                "label": np.asarray(labels, dtype=object)[keep],
                "mechanism": np.full(keep.size, mapped, dtype=object),
                "attacker_error_m": np.asarray(plan.risk.place_error_m, dtype=float)[keep],
                "report_error_m": np.asarray(plan.place_loss_m, dtype=float)[keep],
            },
        )
    return places_geopackage(lon, lat, places_table(result, instance, labels), layers=layers)


def plan_geojson(result: PlanResult, instance: panda.Instance, labels: tuple[str, ...]) -> bytes:
    """The GeoJSON: the ``places`` layer."""
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    return places_geojson(lon, lat, places_table(result, instance, labels))
