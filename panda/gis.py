"""Places in and out of GIS files: GeoJSON, GeoPackage and zipped shapefiles, through pyogrio (GDAL).

In (:func:`read_places_gis`, reached through :func:`panda.places.parse_places_file`): an uploaded file is
hostile. Its size is bounded before this module sees it; a zip's members are checked from its directory
(how many, what they say they unpack to, their names) before one byte is unpacked, and unpacked with a
running count; GDAL reads at most ``max_rows + 1`` features; every failure is a ValueError with a sentence
(GDAL's own messages name temporary paths and are not shown). Places are points: a MultiPoint gives one place
per point (each with the feature's weight); lines and polygons are refused rather than replaced by centroids,
because the centroid of a district or a road is not a place anybody goes to. Coordinates are reprojected
from the file's CRS to WGS84; a file without a CRS is taken as WGS84 only when its coordinates are degrees.

Out (:func:`places_geojson`, :func:`places_geopackage`): points with attribute columns, CRS EPSG:4326, as
bytes (written to a temporary folder, read back, removed).
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import numpy as np

from panda.places import (
    _WEIGHT_NAMES,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    PLACES_FORMATS,
    Places,
    _check_place,
    _check_positive,
    _check_size,
    _places,
    _too_many,
    _upload_arguments,
    parse_places_csv,
    sniff_places_format,
)

__all__ = [
    "MAX_ZIP_MEMBERS",
    "UNZIP_FACTOR",
    "PointLayer",
    "places_geojson",
    "places_geopackage",
    "read_places_gis",
    "parse_places_file",
]

#: A zipped shapefile holds a handful of files (.shp, .shx, .dbf, .prj, .cpg, an index or two, metadata).
MAX_ZIP_MEMBERS = 32
#: A zip may unpack to at most this many times its own size (any shapefile of points stays far below:
#: points compress by a factor of two or three; a zip bomb by a factor of a thousand or more).
UNZIP_FACTOR = 20
_UNZIP_FLOOR = 1_000_000  # bytes a small zip may always unpack to (a tiny zip of a .dbf with wide fields)
_CHUNK = 1 << 16
#: The parts of a shapefile GDAL needs (.shp, .shx, .dbf) or uses (.prj: its CRS; .cpg: the .dbf's encoding).
_NEEDED = (".shp", ".shx", ".dbf")
_OPTIONAL = (".prj", ".cpg")
_WHAT = {"geojson": "GeoJSON", "gpkg": "a GeoPackage", "shapefile": "a zipped shapefile"}
_AGAIN = "export it again from your GIS (points in any coordinate system), or upload CSV (lat, lon, weight)"
#: shapely's geometry type ids of points and multipoints.
_POINT, _MULTIPOINT = 0, 4
_WGS84 = "EPSG:4326"


def read_places_gis(data: bytes, fmt: str, *, max_rows: int = DEFAULT_MAX_ROWS) -> Places:
    """Places from the bytes of a GeoJSON file, a GeoPackage or a zipped shapefile.

    Call :func:`panda.places.parse_places_file` (which bounds the size and finds ``fmt``) rather than this.

    Parameters
    ----------
    data
        The file's bytes (already bounded in size).
    fmt
        ``"geojson"``, ``"gpkg"`` or ``"shapefile"`` (a zip holding one shapefile).
    max_rows
        Largest accepted number of places (points, after splitting MultiPoints).

    Raises
    ------
    ValueError
        For any problem with the file, with a sentence saying what to fix.
    """
    if fmt not in PLACES_FORMATS or fmt == "csv":
        msg = f"The 'fmt' parameter of read_places_gis must be one of 'geojson', 'gpkg', 'shapefile'. Got {fmt!r}."
        raise ValueError(msg)
    max_r = int(_check_positive(max_rows, "max_rows", "read_places_gis"))
    with tempfile.TemporaryDirectory(prefix="panda-places-") as folder:
        if fmt == "shapefile":
            path = _unzip_shapefile(bytes(data), Path(folder))
        else:
            path = Path(folder) / ("places.gpkg" if fmt == "gpkg" else "places.geojson")
            path.write_bytes(bytes(data))
        return _read_points(path, _WHAT[fmt], max_r)


# ---------------------------------------------------------------------------------------------
# Zipped shapefiles
# ---------------------------------------------------------------------------------------------


def _unzip_shapefile(data: bytes, folder: Path) -> Path:
    """Unpack the one shapefile of a zip into ``folder`` under names of our own; its ``.shp`` path.

    Everything is checked from the zip's directory first: the number of members, the sizes they declare and
    their names (none may point outside the archive, though nothing is ever written under a member's name).
    Members are then read in chunks with a running count, so a member that unpacks to more than it declared
    stops at the cap too.
    """
    try:
        archive = zipfile.ZipFile(_BytesReader(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
        msg = f"The file is not a readable zip archive: {_AGAIN}."
        raise ValueError(msg) from None
    with archive:
        if len(members) > MAX_ZIP_MEMBERS:
            msg = f"The zip holds {len(members):,} files (at most {MAX_ZIP_MEMBERS} are accepted): zip the shapefile."
            raise ValueError(msg)
        cap = max(UNZIP_FACTOR * len(data), _UNZIP_FLOOR)
        declared = sum(m.file_size for m in members)
        if declared > cap:
            msg = (
                f"The zip unpacks to {declared:,} bytes, more than the {cap:,} accepted for a file of its size: "
                "zip only the shapefile of your places."
            )
            raise ValueError(msg)
        for m in members:
            _check_member_name(m.filename)
        parts = _shapefile_parts(members)
        left = cap
        for suffix, member in parts.items():
            if member.flag_bits & 0x1:
                msg = f"The zip is encrypted ({member.filename[:80]!r}): zip the shapefile without a password."
                raise ValueError(msg)
            left = _unpack(archive, member, folder / f"places{suffix}", left, cap)
    return folder / "places.shp"


def _check_member_name(name: str) -> None:
    """Refuse a member whose name points outside the archive (``../``, an absolute path, a drive letter)."""
    posix = name.replace("\\", "/")
    path = PurePosixPath(posix)
    if path.is_absolute() or ".." in path.parts or (len(posix) > 1 and posix[1] == ":") or "\x00" in name:
        msg = (
            f"The zip holds a file named {name[:80]!r}, which points outside the archive: zip the shapefile's "
            "files themselves (places.shp, places.shx, places.dbf, places.prj)."
        )
        raise ValueError(msg)


def _shapefile_parts(members: list[zipfile.ZipInfo]) -> dict[str, zipfile.ZipInfo]:
    """Find the members of the zip's one shapefile, by suffix (a sentence for none, several, or parts missing)."""

    def junk(name: str) -> bool:  # a Mac's resource forks ride along in zips made by its Finder
        return name.startswith("__MACOSX/") or PurePosixPath(name).name.startswith("._")

    files = [m for m in members if not m.is_dir() and not junk(m.filename.replace("\\", "/"))]
    shps = [m for m in files if m.filename.lower().endswith(".shp")]
    if len(shps) != 1:
        found = ", ".join(repr(m.filename[:60]) for m in shps[:5])
        msg = (
            f"The zip holds {len(shps)} shapefiles{f' ({found})' if shps else ''}: upload a zip of exactly one "
            "(its .shp, .shx, .dbf and .prj files)."
        )
        raise ValueError(msg)
    stem = shps[0].filename.replace("\\", "/")[: -len(".shp")].lower()
    by_suffix = {
        m.filename.replace("\\", "/")[len(stem) :].lower(): m
        for m in files
        if m.filename.replace("\\", "/").lower().startswith(stem)
    }
    missing = [s for s in _NEEDED if s not in by_suffix]
    if missing:
        msg = (
            f"The zip has {shps[0].filename[:60]!r} but no {' or '.join(missing)} beside it: a shapefile needs its "
            ".shp, .shx and .dbf files (and .prj for its coordinate system); zip them together."
        )
        raise ValueError(msg)
    return {s: by_suffix[s] for s in _NEEDED + _OPTIONAL if s in by_suffix}


def _unpack(archive: zipfile.ZipFile, member: zipfile.ZipInfo, target: Path, left: int, cap: int) -> int:
    """Copy ``member`` to ``target`` in chunks while fewer than ``left`` bytes are unpacked; the bytes still allowed."""
    try:
        with archive.open(member) as src, target.open("wb") as out:
            while chunk := src.read(_CHUNK):
                left -= len(chunk)
                if left < 0:
                    msg = f"The zip unpacks to more than {cap:,} bytes: zip only the shapefile of your places."
                    raise ValueError(msg)
                out.write(chunk)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError):
        # A CRC or size mismatch, an unsupported compression method, a truncated member.
        msg = f"The zip's file {member.filename[:80]!r} cannot be unpacked (damaged or unsupported): {_AGAIN}."
        raise ValueError(msg) from None
    return left


class _BytesReader:
    """A read-only seekable view of bytes for ZipFile (io.BytesIO would copy them once more)."""

    def __init__(self, data: bytes) -> None:
        self._view = memoryview(data)
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n is None or n < 0 else min(self._pos + n, len(self._view))
        out = bytes(self._view[self._pos : end])
        self._pos = max(end, self._pos)
        return out

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, len(self._view))[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def seekable(self) -> bool:
        return True


# ---------------------------------------------------------------------------------------------
# Points through GDAL
# ---------------------------------------------------------------------------------------------


def _gdal_failed(what: str) -> ValueError:
    return ValueError(f"The file cannot be read as {what}: {_AGAIN}.")


def _read_points(path: Path, what: str, max_rows: int) -> Places:
    """Read at most ``max_rows + 1`` features of the file's places layer; check, reproject, weigh them."""
    import pyogrio
    import pyogrio.raw

    layer = _places_layer(path, what)
    try:
        info = pyogrio.read_info(path, layer=layer)
        weight_field = _weight_field([str(f) for f in info["fields"]])
        meta, _, wkb, field_data = pyogrio.raw.read(
            path,
            layer=layer,
            columns=[] if weight_field is None else [weight_field],
            max_features=max_rows + 1,  # one more than allowed: enough to know there are too many
            force_2d=True,
        )
    except Exception:  # noqa: BLE001 (any GDAL failure on a hostile file is the same sentence)
        raise _gdal_failed(what) from None
    n = 0 if wkb is None else len(wkb)
    if n == 0:
        msg = f"The file ({what}) has no places: {_AGAIN}."
        raise ValueError(msg)
    if n > max_rows:
        raise _too_many(max_rows, "points")
    x, y, feature = _points(wkb, max_rows)
    weight = np.ones(n) if weight_field is None else _weights(field_data[0])
    lon, lat = _to_wgs84(x, y, feature, meta.get("crs"))
    w = weight[feature]
    for i in range(lon.size):  # the same checks and sentences as a CSV row
        _check_place(float(lat[i]), float(lon[i]), float(w[i]), f"Feature {feature[i] + 1}")
    return _places(lat.tolist(), lon.tolist(), w.tolist())


def _places_layer(path: Path, what: str) -> str:
    """Pick the layer to read: the only one, else one named ``places``, else the only one of points."""
    import pyogrio

    try:
        layers = pyogrio.list_layers(path)
    except Exception:  # noqa: BLE001 (any GDAL failure on a hostile file is the same sentence)
        raise _gdal_failed(what) from None
    names = [str(row[0]) for row in layers]
    if len(names) == 1:
        return names[0]
    if "places" in names:
        return "places"
    points = [str(row[0]) for row in layers if "point" in str(row[1]).lower()]
    if len(points) == 1:
        return points[0]
    if not names:
        msg = f"The file ({what}) has no layers: {_AGAIN}."
        raise ValueError(msg)
    shown = ", ".join(repr(n[:40]) for n in names[:6])
    msg = f"The file has {len(names)} layers ({shown}): name the layer of your places 'places', or keep only it."
    raise ValueError(msg)


def _weight_field(fields: list[str]) -> str | None:
    hits = [f for f in fields if f.strip().lower() in _WEIGHT_NAMES]
    if len(hits) > 1:
        msg = f"The file has {len(hits)} weight columns ({', '.join(repr(h) for h in hits)}): keep only one."
        raise ValueError(msg)
    return hits[0] if hits else None


def _points(wkb: np.ndarray, max_rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x``, ``y`` of every point and the index of its feature (a MultiPoint gives several)."""
    import shapely

    try:
        geoms = shapely.from_wkb(wkb, on_invalid="raise")
    except Exception:  # noqa: BLE001 (a damaged geometry: GEOS's message is not for people)
        msg = f"The file has a damaged geometry: {_AGAIN}."
        raise ValueError(msg) from None
    kinds = shapely.get_type_id(geoms)
    for i in np.flatnonzero(~np.isin(kinds, (_POINT, _MULTIPOINT))):
        if geoms[i] is None:
            msg = f"Feature {i + 1} has no geometry: give it a point or delete it."
        else:
            msg = (
                f"Feature {i + 1} is a {geoms[i].geom_type}, not a point: places "
                "must be points (in QGIS, Vector > Geometry Tools > Centroids makes points of polygons)."
            )
        raise ValueError(msg)
    counts = shapely.get_num_geometries(geoms)  # before splitting: a MultiPoint of a million points stays unsplit
    if int(counts.sum()) > max_rows:
        raise _too_many(max_rows, "points")
    if (counts == 0).any() or shapely.is_empty(geoms).any():
        i = int(np.flatnonzero((counts == 0) | shapely.is_empty(geoms))[0])
        msg = f"Feature {i + 1} has an empty point: give it coordinates or delete it."
        raise ValueError(msg)
    parts, feature = shapely.get_parts(geoms, return_index=True)
    xy = shapely.get_coordinates(parts)
    return xy[:, 0].astype(float), xy[:, 1].astype(float), feature


def _weights(values: np.ndarray) -> np.ndarray:
    """Read the weight of each feature as a float (text numbers too), each a finite number."""
    out = np.empty(len(values))
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and np.isnan(v)) or (isinstance(v, str) and not v.strip()):
            msg = f"Feature {i + 1} has no weight: fill it in or delete the feature."
            raise ValueError(msg)
        try:
            out[i] = float(v)
        except (TypeError, ValueError):
            msg = f"Feature {i + 1} has weight {str(v)[:40]!r}, which is not a number: write a number like 1 or 2.5."
            raise ValueError(msg) from None
        if not np.isfinite(out[i]):
            msg = f"Feature {i + 1} has weight '{v}', which is not a finite number: write a finite number."
            raise ValueError(msg)
    return out


def _to_wgs84(x: np.ndarray, y: np.ndarray, feature: np.ndarray, crs: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Longitude and latitude in WGS84 degrees of points in ``crs`` (None: degrees if they look like degrees)."""
    for values, what in ((x, "x (longitude)"), (y, "y (latitude)")):
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            i = bad[0]
            where = f"Feature {feature[i] + 1}"
            msg = f"{where} has {what} '{values[i]}', which is not a finite number: write a finite number."
            raise ValueError(msg)
    if not crs:
        if (np.abs(x) <= 180.0).all() and (np.abs(y) <= 90.0).all():
            return x, y
        i = int(np.flatnonzero((np.abs(x) > 180.0) | (np.abs(y) > 90.0))[0])
        msg = (
            f"The file has no coordinate reference system and its coordinates are not degrees (feature "
            f"{feature[i] + 1} is at x {x[i]:,.6g}, y {y[i]:,.6g}): save it with its coordinate reference system "
            "(for a shapefile, zip its .prj file too) or in WGS84 (EPSG:4326)."
        )
        raise ValueError(msg)
    import pyproj

    try:
        source = pyproj.CRS.from_user_input(crs)
        if source.equals(pyproj.CRS.from_user_input(_WGS84), ignore_axis_order=True):
            return x, y  # pyogrio gives x = longitude: nothing to do, and nothing rounded
        lon, lat = pyproj.Transformer.from_crs(source, _WGS84, always_xy=True).transform(x, y)
    except Exception:  # noqa: BLE001 (PROJ's message is not for people)
        msg = "The file's coordinate reference system cannot be converted to WGS84: save the file in WGS84 (EPSG:4326)."
        raise ValueError(msg) from None
    lon, lat = np.asarray(lon, dtype=float), np.asarray(lat, dtype=float)
    bad = np.flatnonzero(~(np.isfinite(lon) & np.isfinite(lat)))
    if bad.size:
        msg = (
            f"Feature {feature[bad[0]] + 1} lies outside the area of the file's coordinate reference system "
            f"({source.name}): check the coordinates, or save the file in WGS84 (EPSG:4326)."
        )
        raise ValueError(msg)
    return lon, lat


# ---------------------------------------------------------------------------------------------
# Writing places
# ---------------------------------------------------------------------------------------------


class PointLayer(NamedTuple):
    """One layer of points: ``lon``, ``lat`` (WGS84 degrees) and attribute columns (name -> ``(n,)`` array)."""

    lon: np.ndarray
    lat: np.ndarray
    columns: Mapping[str, np.ndarray] = {}


_RESERVED = {"geometry", "geom", "fid", "ogc_fid"}


def _frame(layer: PointLayer, func: str):
    """Make a GeoDataFrame of the layer, checked: finite degrees, columns ``(n,)`` of numbers, booleans or text."""
    import geopandas as gpd

    lon = np.asarray(layer.lon, dtype=float)
    lat = np.asarray(layer.lat, dtype=float)
    if lon.ndim != 1 or lat.shape != lon.shape:
        msg = f"The lon and lat of {func} must be 1-D arrays of one length. Got shapes {lon.shape} and {lat.shape}."
        raise ValueError(msg)
    if not (np.isfinite(lon) & np.isfinite(lat) & (np.abs(lon) <= 180) & (np.abs(lat) <= 90)).all():
        msg = f"The lon and lat of {func} must be finite WGS84 degrees (lon in [-180, 180], lat in [-90, 90])."
        raise ValueError(msg)
    data = {}
    seen: set[str] = set()
    for name, values in dict(layer.columns).items():
        key = str(name).strip().lower()
        if not isinstance(name, str) or not name.strip() or key in _RESERVED or key in seen:
            msg = f"The column name {name!r} of {func} is empty, reserved ({sorted(_RESERVED)}) or given twice."
            raise ValueError(msg)
        seen.add(key)
        arr = np.asarray(values)
        if arr.shape != lon.shape or arr.dtype.kind not in "biufUO":
            msg = f"The column {name!r} of {func} must be a ({lon.size},) array of numbers or text. Got {arr.shape}."
            raise ValueError(msg)
        data[name] = arr.astype(object) if arr.dtype.kind == "U" else arr
    return gpd.GeoDataFrame(data, geometry=gpd.points_from_xy(lon, lat), crs=_WGS84)


def _written(write, suffix: str) -> bytes:
    """Bytes of the file ``write(path)`` makes in a private temporary folder (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="panda-export-") as folder:
        path = Path(folder) / f"places{suffix}"
        write(path)
        return path.read_bytes()


def places_geojson(lon, lat, columns: Mapping[str, np.ndarray] | None = None) -> bytes:
    """Places as GeoJSON bytes: one Point feature per place with its ``columns`` as properties.

    Coordinates are WGS84 longitude and latitude (the file names its CRS, OGC CRS84); numbers are written with
    17 significant digits so that they read back as the same doubles (coordinates to within 1e-15 degrees);
    NaN is written as ``null``.
    """
    import pyogrio

    frame = _frame(PointLayer(lon, lat, columns or {}), "places_geojson")
    opts = {"SIGNIFICANT_FIGURES": 17, "COORDINATE_PRECISION": 15}
    return _written(lambda p: pyogrio.write_dataframe(frame, p, driver="GeoJSON", layer="places", **opts), ".geojson")


def places_geopackage(
    lon,
    lat,
    columns: Mapping[str, np.ndarray] | None = None,
    *,
    layers: Mapping[str, PointLayer] | None = None,
) -> bytes:
    """Places as GeoPackage bytes: layer ``places`` (points with ``columns``), then any further ``layers``.

    Further layers are points too (a place's reports, an exposure layer), each a :class:`PointLayer` under
    its name. Every layer has CRS EPSG:4326; coordinates and numbers are stored as the same doubles.
    """
    import pyogrio

    frames = {"places": _frame(PointLayer(lon, lat, columns or {}), "places_geopackage")}
    for name, layer in (layers or {}).items():
        # GeoPackage table names are case-insensitive (SQLite): 'Places' would clash with 'places'.
        if not isinstance(name, str) or not name.strip() or name.lower() in {k.lower() for k in frames}:
            msg = f"The layer name {name!r} of places_geopackage is empty or given twice ('places' is the first)."
            raise ValueError(msg)
        frames[name] = _frame(PointLayer(*layer), "places_geopackage")

    def write(path: Path) -> None:
        for name, frame in frames.items():
            pyogrio.write_dataframe(frame, path, driver="GPKG", layer=name, append=path.exists())

    return _written(write, ".gpkg")


def parse_places_file(
    data: bytes,
    filename: str = "",
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_rows: int = DEFAULT_MAX_ROWS,
) -> Places:
    """Read uploaded places from CSV, GeoJSON, a GeoPackage or a zipped shapefile (by their bytes).

    CSV goes to :func:`panda.places.parse_places_csv`; the GIS formats to :func:`read_places_gis` (points,
    reprojected to WGS84, an optional ``weight`` attribute), under the same limits and sentences. The size
    is checked before anything else.

    Parameters
    ----------
    data
        The file's bytes.
    filename
        The name it was uploaded under (only for a clearer sentence when its bytes are not what it claims).
    max_bytes, max_rows
        Largest accepted file size in bytes and number of places.

    Raises
    ------
    ValueError
        For any problem with the file, with a sentence saying what to fix.
    """
    raw, max_b, max_r = _upload_arguments(data, max_bytes, max_rows, "parse_places_file")
    _check_size(raw, max_b, max_r)
    fmt = sniff_places_format(raw, filename)
    if fmt == "csv":
        return parse_places_csv(raw, max_bytes=max_b, max_rows=max_r)
    return read_places_gis(raw, fmt, max_rows=max_r)
