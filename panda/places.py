"""Places on the map, read from files: the shipped points of interest and uploaded CSV files.

A place is a ``lon``/``lat`` in WGS84 degrees with a weight. :mod:`panda.priors` turns places into a
prior over the secret domain (and keeps uploaded places files on the server); it re-exports the names
of this module.
"""

from __future__ import annotations

import csv
import functools
import gzip
import io
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from panda.network import DATA_DIR

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_ROWS",
    "POI_DIR",
    "Places",
    "list_poi_cities",
    "load_pois",
    "parse_places_csv",
    "PLACES_FORMATS",
    "sniff_places_format",
]

#: Folder of the shipped points-of-interest files ``<city>.csv.gz`` (made by data/make_pois.py).
POI_DIR = DATA_DIR / "pois"
#: Upload limits of :func:`parse_places_csv`.
DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_MAX_ROWS = 20_000


@dataclass(frozen=True, eq=False)
class Places:
    """Places on the map: where people go, each with a weight.

    Attributes
    ----------
    lon, lat
        ``(n,)`` coordinates in WGS84 degrees.
    weight
        ``(n,)`` non-negative weights (relative importance; 1 each when none was given).
    kind
        ``(n,)`` what each place is (e.g. ``"amenity=cafe"``), or ``None``.
    """

    lon: np.ndarray
    lat: np.ndarray
    weight: np.ndarray
    kind: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.lon.shape[0]
        for name in ("lat", "weight"):
            if getattr(self, name).shape != (n,):
                msg = f"Places.{name} must have the shape of lon ({n},). Got {getattr(self, name).shape} instead."
                raise ValueError(msg)
        if self.kind is not None and self.kind.shape != (n,):
            msg = f"Places.kind must have the shape of lon ({n},). Got {self.kind.shape} instead."
            raise ValueError(msg)

    def __len__(self) -> int:
        return int(self.lon.shape[0])


def _check_positive(value: object, name: str, func: str, low: float = 0.0, high: float = np.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"The '{name}' parameter of {func} must be a number. Got {value!r} instead."
        raise TypeError(msg)
    v = float(value)
    if not (low < v <= high) or np.isnan(v):
        bound = f"> {low:g}" if high == np.inf else f"in ({low:g}, {high:g}]"
        msg = f"The '{name}' parameter of {func} must be a number {bound}. Got {value!r} instead."
        raise ValueError(msg)
    return v


# ---------------------------------------------------------------------------------------------
# Shipped points of interest
# ---------------------------------------------------------------------------------------------


def _upload_arguments(data: object, max_bytes: object, max_rows: object, func: str) -> tuple[bytes, int, int]:
    """Check an upload's bytes and limits (a programming error is a TypeError or ValueError naming ``func``)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        msg = f"The 'data' parameter of {func} must be the file's bytes. Got {type(data).__name__} instead."
        raise TypeError(msg)
    max_b = int(_check_positive(max_bytes, "max_bytes", func))
    max_r = int(_check_positive(max_rows, "max_rows", func))
    return bytes(data), max_b, max_r


def list_poi_cities() -> list[str]:
    """Embedded cities that ship a points-of-interest file (``data/pois/<city>.csv.gz``)."""
    return sorted(p.name.removesuffix(".csv.gz") for p in POI_DIR.glob("*.csv.gz"))


def load_pois(city: str) -> Places:
    """Points of interest of an embedded city: amenities, shops and offices from OpenStreetMap.

    Derived by ``data/make_pois.py`` from the raw extract the city's roads came from, clipped to
    the road network's bounding box (see data/README.md; ODbL 1.0, (c) OpenStreetMap contributors).

    Parameters
    ----------
    city
        An embedded city name (:func:`list_poi_cities`), as given to :func:`panda.load_city`
        (``network.name`` of an embedded city).

    Returns
    -------
    Places
        ``lon``, ``lat`` (degrees), ``weight`` (1 each) and ``kind`` (e.g. ``"shop=bakery"``).
    """
    if not isinstance(city, str):
        msg = f"The 'city' parameter of load_pois must be a str. Got {type(city).__name__} instead."
        raise TypeError(msg)
    key = city.strip().lower()
    available = list_poi_cities()
    if key not in available:
        msg = (
            f"No points of interest are shipped for {city!r}: they exist for the embedded cities {available}. "
            "For another area, upload your own places as a CSV (panda.parse_places_csv) or use "
            "prior='road_density'."
        )
        raise ValueError(msg)
    return _load_poi_file(POI_DIR / f"{key}.csv.gz")


@functools.lru_cache(maxsize=8)
def _load_poi_file(path: Path) -> Places:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    lon = np.array([float(r["lon"]) for r in rows])
    lat = np.array([float(r["lat"]) for r in rows])
    kind = np.array([r["kind"] for r in rows], dtype=object)
    weight = np.ones(lon.size)
    for a in (lon, lat, kind, weight):
        a.setflags(write=False)
    return Places(lon=lon, lat=lat, weight=weight, kind=kind)


# ---------------------------------------------------------------------------------------------
# Uploaded places
# ---------------------------------------------------------------------------------------------

_LAT_NAMES = ("lat", "latitude")
_LON_NAMES = ("lon", "lng", "long", "longitude")
_WEIGHT_NAMES = ("weight",)
_HOW = "a CSV file with a header row 'lat,lon' (optionally ',weight') and one place per row"


class _Columns(NamedTuple):
    """Where the values of a place are in a row of an uploaded file (``weight`` is None without that column)."""

    width: int
    lat: int
    lon: int
    weight: int | None


def parse_places_csv(
    data: bytes,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Places:
    """Read uploaded places (where people go) from CSV bytes.

    The header names a latitude column (``lat`` or ``latitude``), a longitude column (``lon``,
    ``lng``, ``long`` or ``longitude``) and optionally ``weight``, in any case and order; other
    columns are ignored. Values are separated by commas or semicolons (with semicolons a decimal
    comma is accepted: ``53,557;13,261``). The work is bounded by ``max_bytes`` and ``max_rows``.

    Parameters
    ----------
    data
        The file's bytes (UTF-8, a byte-order mark is allowed).
    max_bytes
        Largest accepted file size in bytes.
    max_rows
        Largest accepted number of places.

    Returns
    -------
    Places
        Coordinates in degrees and weights (1 each without a weight column).

    Raises
    ------
    ValueError
        For any problem with the file, with a sentence saying what to fix.
    """
    raw, max_b, max_r = _upload_arguments(data, max_bytes, max_rows, "parse_places_csv")
    text = _csv_text(raw, max_b, max_r)
    lat, lon, weight = _read_places(text, max_r)
    return _places(lat, lon, weight)


#: What a GIS file's bytes begin with (zip: a local file header, or the end record of an empty archive).
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: What a file's name claims it is; only used to say so when its bytes are not that (the bytes decide).
_CLAIMED = {
    ".gpkg": ("gpkg", "a GeoPackage (it does not begin like one)"),
    ".zip": ("shapefile", "a zip archive"),
    ".geojson": ("geojson", "GeoJSON (it does not begin with '{')"),
    ".json": ("geojson", "GeoJSON (it does not begin with '{')"),
}
_SHAPEFILE_PARTS = (".shp", ".shx", ".dbf", ".prj", ".cpg")
PLACES_FORMATS = ("csv", "geojson", "gpkg", "shapefile")


def sniff_places_format(data: bytes, filename: str = "") -> str:
    """Tell the format of an uploaded places file from its first bytes: one of :data:`PLACES_FORMATS`.

    A zip archive is taken for a zipped shapefile, an SQLite database for a GeoPackage, text that begins
    with ``{`` for GeoJSON, anything else for CSV. The name does not decide (a browser's or a person's name
    may be wrong); a name that claims a GIS format the bytes do not have gets a sentence instead of a CSV
    parser's complaint.
    """
    head = bytes(data[:64])
    if head.startswith(_ZIP_MAGIC):
        return "shapefile"
    if head.startswith(_SQLITE_MAGIC):
        return "gpkg"
    if head.removeprefix(b"\xef\xbb\xbf").lstrip(b" \t\r\n")[:1] == b"{":
        return "geojson"
    name = Path(str(filename).replace("\\", "/")).name[:80]
    suffix = Path(name.lower()).suffix
    if suffix in _SHAPEFILE_PARTS:
        msg = (
            f"{name!r} is one part of a shapefile, which is several files (.shp, .shx, .dbf and .prj): zip them "
            "together and upload the .zip."
        )
        raise ValueError(msg)
    if suffix in _CLAIMED:
        msg = (
            f"The file {name!r} is not {_CLAIMED[suffix][1]}: export it again from your GIS, or upload "
            "GeoJSON, a GeoPackage, a zipped shapefile or CSV."
        )
        raise ValueError(msg)
    return "csv"


def _csv_text(raw: bytes, max_bytes: int, max_rows: int) -> str:
    """Return the file's text once its size, emptiness and encoding are checked (before any CSV parsing)."""
    _check_size(raw, max_bytes, max_rows)
    if raw.strip() == b"":
        msg = f"The file is empty: upload {_HOW}."
        raise ValueError(msg)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        msg = f"The file is not text (not UTF-8 CSV): save it as CSV UTF-8 and upload {_HOW}."
        raise ValueError(msg)
    return text


def _read_places(text: str, max_rows: int) -> tuple[list[float], list[float], list[float]]:
    """``(lat, lon, weight)`` of the places in the CSV text: the header, then one checked place per row.

    Blank rows are skipped; the first other row is the header. A file with more than ``max_rows``
    places stops at the first row beyond them, and one with more than twice as many rows, blank ones
    included, at the first row beyond those (a file of empty rows would otherwise be read to its end).
    """
    # Line by line: a list of every line (splitlines) of a 2 MB file of short lines is tens of MB.
    first = next((ln for ln in io.StringIO(text, newline="") if ln.strip()), "")
    delimiter = ";" if first.count(";") > first.count(",") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    columns: _Columns | None = None
    lon: list[float] = []
    lat: list[float] = []
    weight: list[float] = []
    try:
        for n_rows, row in enumerate(reader, start=1):
            if n_rows > 2 * max_rows + 1:
                msg = (
                    f"The file has more than {2 * max_rows + 1:,} rows, most of them empty: keep one row per place "
                    f"(at most {max_rows:,}) and the header."
                )
                raise ValueError(msg)
            if not any(cell.strip() for cell in row):
                continue
            if columns is None:
                columns = _header_columns(row)
                continue
            if len(lat) >= max_rows:
                raise _too_many(max_rows, "rows")
            y, x, w = _place_row(row, columns, reader.line_num, delimiter == ";")
            lat.append(y)
            lon.append(x)
            weight.append(w)
    except csv.Error as exc:
        msg = f"The file is not valid CSV near line {reader.line_num} ({exc}): upload {_HOW}."
        raise ValueError(msg) from None
    if columns is None:
        msg = f"The file is empty: upload {_HOW}."
        raise ValueError(msg)
    return lat, lon, weight


def _header_columns(row: list[str]) -> _Columns:
    """Find the columns the header row names; a sentence when the latitude or longitude column is missing."""
    header = [cell.strip().lower() for cell in row]
    i_lat = _find_column(header, _LAT_NAMES, "latitude")
    i_lon = _find_column(header, _LON_NAMES, "longitude")
    i_w = _find_column(header, _WEIGHT_NAMES, "weight")
    if i_lat is None or i_lon is None:
        missing = [name for name, i in (("lat", i_lat), ("lon", i_lon)) if i is None]
        found = ", ".join(repr(h) for h in header[:10]) or "none"
        names = " and ".join(f"'{m}'" for m in missing)
        msg = (
            f"The file has no {names} column{'s' if len(missing) > 1 else ''} (found: {found}): the "
            "first row must name the columns, e.g. 'lat,lon' or 'latitude,longitude' "
            "(optionally 'weight')."
        )
        raise ValueError(msg)
    return _Columns(width=len(header), lat=i_lat, lon=i_lon, weight=i_w)


def _find_column(header: list[str], names: tuple[str, ...], what: str) -> int | None:
    hits = [i for i, h in enumerate(header) if h in names]
    if len(hits) > 1:
        found = ", ".join(repr(header[i]) for i in hits)
        msg = f"The file has {len(hits)} {what} columns ({found}): keep only one."
        raise ValueError(msg)
    return hits[0] if hits else None


def _place_row(row: list[str], columns: _Columns, line: int, decimal_comma: bool) -> tuple[float, float, float]:
    """``(lat, lon, weight)`` of one place row (file line ``line``), each value checked."""
    cells = row + [""] * (columns.width - len(row))
    y = _number(cells[columns.lat], line, "latitude", decimal_comma)
    x = _number(cells[columns.lon], line, "longitude", decimal_comma)
    w = 1.0 if columns.weight is None else _number(cells[columns.weight], line, "weight", decimal_comma)
    _check_place(y, x, w, f"Line {line}")
    return y, x, w


def _check_place(y: float, x: float, w: float, where: str) -> None:
    """Refuse a place outside the globe or with a negative weight (``where``: "Line 3", "Feature 3")."""
    if not -90.0 <= y <= 90.0:
        msg = (
            f"{where} has latitude {y:g}, outside [-90, 90] degrees: check that the lat and lon "
            "columns are not swapped."
        )
        raise ValueError(msg)
    if not -180.0 <= x <= 180.0:
        msg = f"{where} has longitude {x:g}, outside [-180, 180] degrees: write it in decimal degrees."
        raise ValueError(msg)
    if w < 0:
        msg = f"{where} has weight {w:g}, which is negative: weights must be 0 or more."
        raise ValueError(msg)


def _check_size(raw: bytes, max_bytes: int, max_rows: int) -> None:
    """Refuse a file too large: the first check of every upload, before any parsing."""
    if len(raw) > max_bytes:
        msg = (
            f"The file is too large ({len(raw):,} bytes; at most {max_bytes:,} are accepted): keep the lat, lon and "
            f"weight columns only, or at most {max_rows:,} places."
        )
        raise ValueError(msg)


def _too_many(max_rows: int, unit: str) -> ValueError:
    """Make the sentence for a file with more than ``max_rows`` places (``unit``: "rows", "points")."""
    msg = (
        f"The file has more than {max_rows:,} places: keep at most {max_rows:,} {unit} "
        "(merge nearby places into one with a weight)."
    )
    return ValueError(msg)


def _number(text: str, line: int, what: str, decimal_comma: bool) -> float:
    raw = text.strip()
    if raw == "":
        msg = f"Line {line} has no {what}: fill it in or delete the line."
        raise ValueError(msg)
    try:
        value = float(raw.replace(",", ".") if decimal_comma else raw)
    except ValueError:
        msg = f"Line {line} has {what} {raw[:40]!r}, which is not a number: write it in decimal degrees like 53.557."
        if what == "weight":
            msg = f"Line {line} has weight {raw[:40]!r}, which is not a number: write a number like 1 or 2.5."
        raise ValueError(msg) from None
    if not np.isfinite(value):
        msg = f"Line {line} has {what} {raw[:40]!r}, which is not a finite number: write a finite number."
        raise ValueError(msg)
    return value


def _places(lat: list[float], lon: list[float], weight: list[float]) -> Places:
    """Return the places read, once the file is known to hold at least one with a positive weight."""
    if not lat:
        msg = "The file has a header but no places: add one row per place (lat, lon)."
        raise ValueError(msg)
    w_arr = np.array(weight)
    if not w_arr.sum() > 0:
        msg = "Every weight is zero: give at least one place a positive weight, or drop the weight column."
        raise ValueError(msg)
    return Places(lon=np.array(lon), lat=np.array(lat), weight=w_arr)
