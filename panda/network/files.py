"""Road networks from files a user has: OSM XML, OSM PBF and GraphML.

An OSM XML file is read by osmnx as it is; a PBF file (and an XML file with a ``network_type``) is read with
pyosmium through osmnx's Overpass way filter, so that it gives the graph a live download of the same
area would give.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from panda.network.roads import NETWORK_TYPES, RoadNetwork, network_from_graph

if TYPE_CHECKING:
    import networkx as nx

_OSM_XML_SUFFIXES = (".osm", ".osm.bz2", ".osm.gz", ".xml", ".xml.bz2", ".xml.gz")
_GRAPHML_SUFFIXES = (".graphml", ".graphml.bz2", ".graphml.gz")


def network_from_file(
    path: str | os.PathLike, *, name: str | None = None, network_type: str | None = None
) -> RoadNetwork:
    """Load a road network from an OSM XML, OSM PBF or GraphML file.

    Parameters
    ----------
    path
        OSM XML (``.osm``, ``.xml``, optionally ``.bz2``/``.gz`` compressed), OSM PBF
        (``.osm.pbf``, ``.pbf``) or GraphML (``.graphml``, e.g. written by ``osmnx.save_graphml``).
        GraphML nodes need ``x``/``y`` (WGS84, or projected with a ``crs`` graph attribute) and
        edges a ``length`` in metres.
    name
        The network's name; defaults to the file name without its suffixes.
    network_type
        Which OpenStreetMap ways become roads: one of :data:`NETWORK_TYPES`, osmnx's Overpass way
        filter for that type (the filter a live download uses), applied with pyosmium. ``None``
        (the default) keeps every way of an OSM XML file (osmnx's ``graph_from_xml``: the embedded
        extracts are filtered already) and applies ``"drive"`` to a PBF file (PBF extracts are
        usually raw: buildings, rivers and paths too). Ignored for GraphML.

    Returns
    -------
    RoadNetwork
        The file's largest strongly connected component.

    Raises
    ------
    ValueError
        When the file is missing, of an unsupported kind, unreadable, or holds no roads.
    """
    if not isinstance(path, (str, os.PathLike)):
        msg = f"The 'path' parameter of network_from_file must be a str or path. Got {type(path).__name__} instead."
        raise TypeError(msg)
    p = Path(path).expanduser()
    if not p.is_file():
        msg = f"The 'path' parameter of network_from_file must name an existing file. Got {str(path)!r} instead."
        raise ValueError(msg)
    if network_type is not None and network_type not in NETWORK_TYPES:
        msg = (
            f"The 'network_type' parameter of network_from_file must be None or one of {NETWORK_TYPES}. "
            f"Got {network_type!r} instead."
        )
        raise ValueError(msg)
    label = name or p.name.split(".")[0]
    suffixes = "".join(p.suffixes[-2:]).lower()
    if suffixes.endswith(".pbf"):
        graph = _read_osm_filtered(p, "pbf", network_type or "drive", label=p.name)
    elif suffixes.endswith(_GRAPHML_SUFFIXES):
        graph = _read_graphml(p)
    elif suffixes.endswith(_OSM_XML_SUFFIXES):
        if network_type is None:
            graph = _read_osm_xml(p)
        else:
            graph = _read_osm_filtered(p, _osmium_xml_format(suffixes), network_type, label=p.name)
    else:
        msg = (
            f"The file {p.name!r} is not a supported road network file: use OSM XML "
            "(.osm, .osm.bz2, .xml), OSM PBF (.osm.pbf) or GraphML (.graphml)."
        )
        raise ValueError(msg)
    try:
        return network_from_graph(graph, name=label, source=str(p.resolve()))
    except ValueError as exc:
        msg = f"The file {p.name!r} is not a usable road network: {exc}"
        raise ValueError(msg) from None


def _read_osm_xml(p: Path) -> nx.MultiDiGraph:
    import osmnx as ox
    from osmnx._errors import InsufficientResponseError

    try:
        return ox.graph_from_xml(p, retain_all=True)
    except InsufficientResponseError:
        msg = f"The file {p.name!r} holds no OpenStreetMap nodes or ways: it is not a road network."
        raise ValueError(msg) from None
    except Exception as exc:  # the XML parser and osmnx raise many types for a file that is not OSM data
        msg = (
            f"The file {p.name!r} could not be read as OpenStreetMap XML ({type(exc).__name__}: {exc}). "
            "Give an OSM XML extract (<osm> with <node> and <way> elements) or a GraphML file."
        )
        raise ValueError(msg) from exc


def _read_graphml(p: Path) -> nx.MultiDiGraph:
    import networkx as nx

    try:
        graph = nx.read_graphml(p, force_multigraph=True)
    except Exception as exc:  # ElementTree and networkx raise many types for a file that is not GraphML
        msg = f"The file {p.name!r} could not be read as GraphML ({type(exc).__name__}: {exc})."
        raise ValueError(msg) from exc
    return graph


# ---------------------------------------------------------------------------------------------
# OSM files read with pyosmium (PBF; filtered XML; uploads)
# ---------------------------------------------------------------------------------------------

#: One condition of an Overpass way filter: ``["key"]``, ``["key"~"regex"]`` or ``["key"!~"regex"]``.
_FILTER_TERM = re.compile(r'\["([^"]+)"(?:(!?~)"([^"]*)")?\]')


def _way_filter(network_type: str) -> list[tuple[str, str | None, re.Pattern | None]]:
    """Return osmnx's Overpass way filter of ``network_type`` as (key, operator, regex) terms."""
    from osmnx._overpass import _get_network_filter

    text = _get_network_filter(network_type)
    terms = [
        (m.group(1), m.group(2), re.compile(m.group(3)) if m.group(2) else None) for m in _FILTER_TERM.finditer(text)
    ]
    if "".join(m.group(0) for m in _FILTER_TERM.finditer(text)) != text:  # a filter form this reader does not know
        msg = f"osmnx's way filter for {network_type!r} has a form panda cannot apply to a file: {text!r}."
        raise RuntimeError(msg)
    return terms


def _way_passes(tags: dict[str, str], terms: list[tuple[str, str | None, re.Pattern | None]]) -> bool:
    """Tell whether a way's tags pass the filter, with Overpass semantics.

    ``[k]``: the key is set; ``[k~r]``: its value matches r (unanchored); ``[k!~r]``: the key is
    absent or its value does not match r.
    """
    for key, op, pattern in terms:
        value = tags.get(key)
        if op is None:
            if value is None:
                return False
        elif op == "~":
            if value is None or not pattern.search(value):  # type: ignore[union-attr]
                return False
        elif value is not None and pattern.search(value):  # type: ignore[union-attr]
            return False
    return True


def _osmium_xml_format(suffixes: str) -> str:
    if suffixes.endswith(".bz2"):
        return "osm.bz2"
    if suffixes.endswith(".gz"):
        return "osm.gz"
    return "osm"


@dataclasses.dataclass(frozen=True)
class ReadLimits:
    """What one read of an OSM file may take; every count is checked as the file streams (stop at once).

    ``None`` is no limit. ``max_nodes``: road nodes kept (distinct nodes of the kept ways); ``max_read_nodes``
    and ``max_read_ways``: nodes and ways read, of any kind; ``max_way_refs``: node references of one way
    (checked on its length, before a list of them is made).
    """

    max_nodes: int | None = None
    max_read_nodes: int | None = None
    max_read_ways: int | None = None
    max_way_refs: int | None = None


#: Node references of kept roads per road node the reader keeps at most (``max_nodes`` times this): a road
#: network's ways share their crossings, so real files have about 1.2 references per node; a file that
#: repeats the same few nodes in many ways would otherwise grow the list of kept ways without bound.
_KEPT_REFS_PER_NODE = 4


def _too_much(label: str, what: str) -> ValueError:
    return ValueError(
        f"The file {label!r} holds {what}, the limit here: cut a smaller area out of it first (for example "
        "with osmium extract) or use an embedded city."
    )


def _osm_elements(
    path: Path,
    fmt: str,
    network_type: str,
    *,
    label: str,
    max_nodes: int | None = None,
    limits: ReadLimits | None = None,
) -> list[dict]:
    """Return the Overpass-JSON elements a live download of ``network_type`` would give for the file.

    Two pyosmium passes: the ways that pass osmnx's filter (a way whose nodes are partly missing,
    as in a clipped extract, is split into its runs of present nodes), then their nodes. ``limits``
    (``max_nodes`` overrides its own) are counted as the file streams: past one, the reading stops at once
    with a ValueError sentence (its iterator is dropped, which closes the file).
    """
    import osmium
    import osmnx as ox

    limits = limits or ReadLimits()
    if max_nodes is not None:
        limits = dataclasses.replace(limits, max_nodes=max_nodes)
    terms = _way_filter(network_type)
    node_tags = set(ox.settings.useful_tags_node)
    ways: list[tuple[int, list[int], dict[str, str]]] = []
    needed: set[int] = set()
    max_ways = limits.max_read_ways
    max_refs = limits.max_way_refs
    max_kept_refs = None if limits.max_nodes is None else _KEPT_REFS_PER_NODE * limits.max_nodes
    n_ways = kept_refs = 0
    required = {key for key, op, _ in terms if op != "!~"}  # keys a way must have to pass the filter

    def processor(kind):
        return osmium.FileProcessor(osmium.io.File(str(path), fmt), kind)

    try:
        for way in processor(osmium.osm.WAY):
            n_ways += 1
            if max_ways is not None and n_ways > max_ways:
                raise _too_much(label, f"more than {max_ways:,} ways (roads or not)")
            if max_refs is not None and len(way.nodes) > max_refs:  # its length, before any list of its nodes
                raise _too_much(label, f"a way of more than {max_refs:,} nodes (OpenStreetMap allows 2,000)")
            if any(key not in way.tags for key in required):
                continue  # no road (most ways of a raw extract): skipped without copying its tags into Python
            tags = {t.k: t.v for t in way.tags}
            if not _way_passes(tags, terms):
                continue
            refs = [n.ref for n in way.nodes]
            kept_refs += len(refs)
            if max_kept_refs is not None and kept_refs > max_kept_refs:
                raise _too_much(label, f"more than {max_kept_refs:,} road node references")
            ways.append((way.id, refs, tags))
            needed.update(refs)
            if limits.max_nodes is not None and len(needed) > limits.max_nodes:
                raise _too_much(label, f"more than {limits.max_nodes:,} road nodes")
        nodes: dict[int, dict] = {}
        if ways:
            n_nodes, max_read = 0, limits.max_read_nodes
            for node in processor(osmium.osm.NODE):
                n_nodes += 1
                if max_read is not None and n_nodes > max_read:
                    raise _too_much(label, f"more than {max_read:,} nodes (of any kind)")
                if node.id in needed and node.location.valid():
                    item = {"type": "node", "id": node.id, "lon": node.location.lon, "lat": node.location.lat}
                    tags = {t.k: t.v for t in node.tags if t.k in node_tags}
                    if tags:
                        item["tags"] = tags
                    nodes[node.id] = item
    except RuntimeError as exc:  # libosmium's parse errors (PBF, XML, compression)
        kind = "OSM PBF" if fmt == "pbf" else "OpenStreetMap XML"
        msg = (
            f"The file {label!r} could not be read as {kind} ({exc}): it is damaged or not an OpenStreetMap "
            "extract. Give an unbroken .osm.pbf, .osm, .osm.bz2 or .osm.gz file."
        )
        raise ValueError(msg) from None
    elements: list[dict] = list(nodes.values())
    for way_id, refs, tags in ways:
        runs: list[list[int]] = [[]]
        for ref in refs:
            if ref in nodes:
                runs[-1].append(ref)
            elif runs[-1]:
                runs.append([])
        runs = [r for r in runs if len(r) >= 2]
        for k, run in enumerate(runs):
            # Pieces of a split way need their own key in osmnx (the way id stays in their tags' place).
            piece_id = way_id if k == 0 else -(way_id * 1000 + k)
            elements.append({"type": "way", "id": piece_id, "nodes": run, "tags": tags})
    if not any(e["type"] == "way" for e in elements):
        msg = (
            f"The file {label!r} holds no '{network_type}' roads (OpenStreetMap ways with a highway tag of that "
            "kind whose nodes are in the file): give an extract with roads in it."
        )
        raise ValueError(msg)
    return elements


def _read_osm_filtered(
    path: Path,
    fmt: str,
    network_type: str,
    *,
    label: str,
    max_nodes: int | None = None,
    limits: ReadLimits | None = None,
) -> nx.MultiDiGraph:
    """Build the graph osmnx builds for a live download of ``network_type``, from a file (no truncation).

    ``limits``: what the reading may take (:class:`ReadLimits`; ``max_nodes`` overrides its own).
    """
    import osmnx as ox
    from osmnx.graph import _create_graph

    elements = _osm_elements(path, fmt, network_type, label=label, max_nodes=max_nodes, limits=limits)
    bidirectional = network_type in ox.settings.bidirectional_network_types
    graph = _create_graph([{"elements": elements}], bidirectional)
    return ox.simplify_graph(graph)
