"""Downloads of a view: its configuration, its result summary, its perturbation matrix (pure).

JSON: strict JSON (no NaN or Infinity literals). A number that is not finite is written as ``null``:
"not available" (NaN: say, no lower bound) and "infinite" (say, an infinite safety margin) alike; the
files say so in their ``"notes"`` field. CSV: a plain table that spreadsheets and ``pandas.read_csv``
read with their defaults (one header row, no comment lines).
"""

from __future__ import annotations

import csv
import io
import json
import math
from urllib.parse import urlencode

import numpy as np

import panda
from app.params import Params, to_query

__all__ = ["jsonable", "config_json", "summary_json", "matrix_csv", "output_column", "JSON_NOTE"]

#: The ``"notes"`` of every JSON download.
JSON_NOTE = (
    "Distances in metres (_m) or kilometres (_km), times in seconds (_s), rates as fractions of 1. "
    "null: the number is not available or not finite (NaN or infinity)."
)


def jsonable(obj: object) -> object:
    """Plain JSON data: numpy scalars and arrays converted, non-finite floats (NaN, ±infinity) as None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer, int)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        value = float(obj)
        return value if math.isfinite(value) else None
    return obj


def config_json(params: Params, config: panda.PandaConfig) -> str:
    """The view (as its link's query string) and the full PandaConfig."""
    query = to_query(params)
    data = {
        "panda_explorer_view": query,
        "link_query_string": "?" + urlencode(query),
        "panda_config": config.to_dict(),
        "attribution": panda.OSM_ATTRIBUTION,
        "notes": JSON_NOTE,
    }
    return json.dumps(jsonable(data), indent=2, allow_nan=False)


def summary_json(result: panda.PandaResult, bound: dict | None = None) -> str:
    """``result.summary()`` plus the dashboard's lower bound (strict JSON; non-finite numbers as null)."""
    data = result.summary()
    if bound is not None:
        data["dashboard_lower_bound"] = bound
    data["attribution"] = panda.OSM_ATTRIBUTION
    data["notes"] = JSON_NOTE
    return json.dumps(jsonable(data), indent=2, allow_nan=False)


def output_column(j: int, record: int, lon: float, lat: float) -> str:
    """The matrix CSV's column of output ``j``: its index, record and coordinates (degrees).

    No commas or semicolons: spreadsheets split on either, depending on the locale.
    """
    return f"output {j} (record {record} at lon {lon:.6f} lat {lat:.6f})"


def matrix_csv(result: panda.PandaResult, instance: panda.Instance) -> str:
    """The anchor perturbation matrix z as a plain CSV table.

    One row per anchor: ``anchor_record``, ``anchor_lon``, ``anchor_lat`` (degrees, WGS84), then one
    column per output holding Pr[output | surrogate anchor]; each output column's name carries the
    output's index, record and coordinates (:func:`output_column`). Rows sum to 1. Map data (c)
    OpenStreetMap contributors (the download's help and the summary JSON say so).
    """
    buf = io.StringIO()
    lon, lat = np.asarray(instance.lon, dtype=float), np.asarray(instance.lat, dtype=float)
    outputs = [int(y) for y in instance.outputs]
    header = ["anchor_record", "anchor_lon", "anchor_lat"] + [
        output_column(j, y, lon[y], lat[y]) for j, y in enumerate(outputs)
    ]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    if result.z is None:
        return buf.getvalue()
    for a, row in zip(result.anchor_union.tolist(), result.z, strict=True):
        writer.writerow([a, f"{lon[a]:.7f}", f"{lat[a]:.7f}", *(f"{v:.6g}" for v in row)])
    return buf.getvalue()
