"""Downloads of a view: its configuration, its result summary, its perturbation matrix (pure)."""

from __future__ import annotations

import io
import json
import math
from urllib.parse import urlencode

import numpy as np

import panda
from app.params import Params, to_query

__all__ = ["jsonable", "config_json", "summary_json", "matrix_csv"]


def jsonable(obj: object) -> object:
    """Plain JSON data: numpy scalars and arrays converted, non-finite floats as strings ("inf", "nan")."""
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
        return value if math.isfinite(value) else str(value)
    return obj


def config_json(params: Params, config: panda.PandaConfig) -> str:
    """The view (as its link's query string) and the full PandaConfig."""
    query = to_query(params)
    data = {
        "panda_explorer_view": query,
        "link_query_string": "?" + urlencode(query),
        "panda_config": config.to_dict(),
        "attribution": panda.OSM_ATTRIBUTION,
    }
    return json.dumps(jsonable(data), indent=2, default=float)


def summary_json(result: panda.PandaResult, bound: dict | None = None) -> str:
    """``result.summary()`` plus the dashboard's lower bound (JSON; non-finite numbers as strings)."""
    data = result.summary()
    if bound is not None:
        data["dashboard_lower_bound"] = bound
    data["attribution"] = panda.OSM_ATTRIBUTION
    return json.dumps(jsonable(data), indent=2, default=float)


def matrix_csv(result: panda.PandaResult, instance: panda.Instance) -> str:
    """The anchor perturbation matrix z: one row per anchor (record, lon, lat), one column per output."""
    buf = io.StringIO()
    buf.write(
        f"# PAnDA perturbation matrix z[anchor, output] = Pr[output | surrogate anchor]; {panda.OSM_ATTRIBUTION}\n"
    )
    out_records = instance.outputs
    header = ["anchor_record", "lon", "lat"] + [f"output_{j}_record_{int(y)}" for j, y in enumerate(out_records)]
    buf.write(",".join(header) + "\n")
    if result.z is None:
        return buf.getvalue()
    lon, lat = instance.lon, instance.lat
    for a, row in zip(result.anchor_union.tolist(), result.z, strict=True):
        buf.write(f"{a},{lon[a]:.7f},{lat[a]:.7f}," + ",".join(f"{v:.6g}" for v in row) + "\n")
    return buf.getvalue()
