"""A view's road network and instance from plain values, with no streamlit (the prepare command uses these;
app/state.py caches the same construction for the dashboard)."""

from __future__ import annotations

from typing import Any

import numpy as np

import panda
from app.model.params import parse_source

__all__ = ["network_of", "prior_argument", "build_instance", "mechanism_numbers_of", "peaked_prior_name"]


def network_of(source: str) -> panda.RoadNetwork:
    """The road network of a source string (``city:<name>``, ``bbox:w,s,e,n`` or ``file:<id>``)."""
    kind, value = parse_source(source)
    if kind == "city":
        return panda.load_city(str(value))
    if kind == "file":
        return panda.network.load_upload(str(value))
    return panda.network_from_bbox(*value)  # type: ignore[misc]


def peaked_prior_name(source: str) -> str:
    """The peaked prior the Lesson's background view compares with uniform: the city's points of interest
    where they are shipped, else road density."""
    kind, value = parse_source(source)
    return "poi" if kind == "city" and str(value) in panda.list_poi_cities() else "road_density"


def build_instance(
    net: panda.RoadNetwork,
    n_records: int,
    n_users: int,
    n_outputs: int,
    seed: int,
    loss: str = "task",
    n_tasks: int = 1,
    prior: str = "uniform",
) -> panda.Instance:
    """The problem instance of a view (``Params.instance_key`` without its source) on ``net``.

    ``prior``: a name of :data:`panda.instance.PRIORS`, or ``csv:<id>`` for uploaded places
    (:func:`panda.priors.save_places_upload`), snapped to the network.
    """
    return panda.make_instance(
        net,
        n_records=n_records,
        n_users=n_users,
        n_outputs=n_outputs,
        n_tasks=min(int(n_tasks), int(n_records)),
        loss=loss,
        prior=prior_argument(net, prior),
        seed=seed,
    )


def prior_argument(net: panda.RoadNetwork, prior: str) -> str | np.ndarray:
    """The ``prior`` argument of :func:`panda.make_instance` for a view's prior: its name, or for ``csv:<id>`` the
    uploaded places' per-node weights on ``net`` (read from this machine's upload folder)."""
    if prior.startswith("csv:"):
        places = panda.priors.load_places_upload(prior.partition(":")[2])
        return panda.poi_weights(net, places.lon, places.lat, weights=places.weight)
    return prior


def mechanism_numbers_of(inst: panda.Instance, mech: Any, epsilon_per_km: float) -> dict:
    """:func:`panda.audit.mechanism_numbers` (the dashboard runs it as the job ``mechanism_numbers``)."""
    from panda.audit import mechanism_numbers

    return mechanism_numbers(inst, mech, epsilon_per_km)
