"""Places in and out of GIS files (issue 40, item 4): GeoJSON, GeoPackage, zipped shapefiles.

* Out: the files the library writes, opened with geopandas and with pyogrio directly, hold every value given
  (coordinates, attribute columns, NaN as null, several layers, CRS EPSG:4326).
* In: GeoJSON, GeoPackage and zipped shapefiles in WGS84 and in a projected CRS (EPSG:25833, Neubrandenburg's
  UTM zone) come back as the same WGS84 places; an upload is kept and reloaded like a CSV one.
* Hostile files get a sentence, never GDAL's message: zip bombs (declared and lying sizes), path traversal,
  too many members, a million-feature GeoPackage (cut at the row limit without reading it all), lines and
  polygons, a file without CRS in metres, garbage named .gpkg, values out of range (the CSV's sentences).
"""

from __future__ import annotations

import io
import json
import re
import sqlite3
import struct
import zipfile

import geopandas as gpd
import numpy as np
import pyogrio
import pyogrio.raw
import pytest
import shapely

from panda import gis, priors
from panda.gis import parse_places_file
from panda.places import DEFAULT_MAX_ROWS, load_pois, parse_places_csv

RNG = np.random.default_rng(40)
#: Neubrandenburg's shipped points of interest (degrees), a sample of them as the places of the round trips.
POIS = load_pois("neubrandenburg")
PICK = RNG.choice(len(POIS), size=60, replace=False)
LON, LAT = POIS.lon[PICK], POIS.lat[PICK]
WEIGHT = RNG.integers(1, 9, size=PICK.size).astype(float)
#: The projected CRS of the round trips: ETRS89 / UTM zone 33N, the official one of Mecklenburg-Vorpommern.
UTM = "EPSG:25833"
#: How close a round trip through a projected CRS must come back (degrees; about a centimetre).
PROJECTED_TOL_DEG = 1e-7


def _frame(lon=LON, lat=LAT, weight=WEIGHT, crs="EPSG:4326") -> gpd.GeoDataFrame:
    frame = gpd.GeoDataFrame({"weight": weight}, geometry=gpd.points_from_xy(lon, lat), crs="EPSG:4326")
    return frame.to_crs(crs)


def _file_bytes(frame: gpd.GeoDataFrame, fmt: str, tmp_path, *, drop=()) -> bytes:
    """The bytes of ``frame`` written as ``fmt`` (a shapefile zipped without the parts in ``drop``)."""
    if fmt == "shapefile":
        folder = tmp_path / "shp"
        folder.mkdir()
        frame.to_file(folder / "places.shp", engine="pyogrio")
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            for part in sorted(folder.iterdir()):
                if part.suffix not in drop:
                    z.write(part, f"places/{part.name}")
        return buf.getvalue()
    path = tmp_path / ("places.gpkg" if fmt == "gpkg" else "places.geojson")
    frame.to_file(path, driver="GPKG" if fmt == "gpkg" else "GeoJSON", engine="pyogrio")
    return path.read_bytes()


def _zip(members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Out
# ---------------------------------------------------------------------------------------------


def _columns(n: int) -> dict[str, np.ndarray]:
    error = RNG.uniform(50, 900, n)
    error[3] = np.nan  # "not available": written as null, read as NaN
    return {
        "error_m": error,
        "attacker_error_m": RNG.uniform(0, 2000, n),
        "chance_within_250m": RNG.uniform(0, 1, n),
        "reports": RNG.integers(0, 50, n),
        "kind": np.array([str(k) for k in POIS.kind[PICK[:n]]]),
    }


def _assert_values(frame, lon, lat, columns, coord_tol):
    np.testing.assert_allclose(frame.geometry.x.to_numpy(), lon, rtol=0, atol=coord_tol)
    np.testing.assert_allclose(frame.geometry.y.to_numpy(), lat, rtol=0, atol=coord_tol)
    for name, values in columns.items():
        got = frame[name].to_numpy()
        if values.dtype.kind in "iuf":
            np.testing.assert_array_equal(got.astype(float), values.astype(float))  # NaN equals NaN here
        else:
            assert got.tolist() == values.tolist()


def test_geojson_holds_every_value(tmp_path):
    columns = _columns(LON.size)
    data = gis.places_geojson(LON, LAT, columns)
    path = tmp_path / "out.geojson"
    path.write_bytes(data)
    frame = gpd.read_file(path)
    assert frame.crs.to_epsg() == 4326
    # 17 significant figures for attributes (the same doubles); coordinates to 15 decimals.
    _assert_values(frame, LON, LAT, columns, coord_tol=1e-14)
    assert json.loads(data)["features"][3]["properties"]["error_m"] is None  # strict JSON: NaN is null
    meta, _, wkb, fields = pyogrio.raw.read(path)
    xy = shapely.get_coordinates(shapely.from_wkb(wkb))
    np.testing.assert_allclose(xy, np.c_[LON, LAT], rtol=0, atol=1e-14)
    np.testing.assert_array_equal(
        fields[list(meta["fields"]).index("chance_within_250m")], columns["chance_within_250m"]
    )


def test_geopackage_holds_every_value_and_its_layers(tmp_path):
    columns = _columns(LON.size)
    reports = gis.PointLayer(LON[:5] + 0.001, LAT[:5], {"place": np.arange(5), "probability": np.full(5, 0.2)})
    exposure = gis.PointLayer(LON[:7], LAT[:7], {"exposure": RNG.uniform(0, 1, 7)})
    data = gis.places_geopackage(LON, LAT, columns, layers={"reports": reports, "exposure": exposure})
    assert data.startswith(b"SQLite format 3\x00")
    path = tmp_path / "out.gpkg"
    path.write_bytes(data)
    assert [str(r[0]) for r in pyogrio.list_layers(path)] == ["places", "reports", "exposure"]
    _assert_values(gpd.read_file(path, layer="places"), LON, LAT, columns, coord_tol=0.0)  # the same doubles
    for name, layer in (("reports", reports), ("exposure", exposure)):
        frame = gpd.read_file(path, layer=name)
        assert frame.crs.to_epsg() == 4326
        _assert_values(frame, layer.lon, layer.lat, layer.columns, coord_tol=0.0)
    meta, _, wkb, fields = pyogrio.raw.read(path, layer="places")
    assert pyogrio.read_info(path, layer="places")["crs"] == "EPSG:4326"
    np.testing.assert_array_equal(shapely.get_coordinates(shapely.from_wkb(wkb)), np.c_[LON, LAT])
    np.testing.assert_array_equal(fields[list(meta["fields"]).index("error_m")], columns["error_m"])
    # What the library writes it reads back as the same places (a weight column is their weight).
    back = parse_places_file(gis.places_geopackage(LON, LAT, {"weight": WEIGHT}), "mine.gpkg")
    np.testing.assert_array_equal(np.c_[back.lon, back.lat, back.weight], np.c_[LON, LAT, WEIGHT])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lon": LON[:3], "lat": LAT[:2]}, "1-D arrays of one length"),
        ({"lon": np.r_[LON[:2], 200.0], "lat": LAT[:3]}, "finite WGS84 degrees"),
        ({"lon": LON[:3], "lat": LAT[:3], "columns": {"geometry": np.ones(3)}}, "reserved"),
        ({"lon": LON[:3], "lat": LAT[:3], "columns": {"a": np.ones(3), "A": np.ones(3)}}, "given twice"),
        ({"lon": LON[:3], "lat": LAT[:3], "columns": {"a": np.ones(4)}}, r"must be a \(3,\) array"),
    ],
)
def test_writers_refuse_bad_layers(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gis.places_geojson(**kwargs)
    with pytest.raises(ValueError, match=match):
        gis.places_geopackage(**kwargs)


# ---------------------------------------------------------------------------------------------
# In: round trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["geojson", "gpkg", "shapefile"])
@pytest.mark.parametrize("crs", ["EPSG:4326", UTM])
def test_places_come_back_in_wgs84(fmt, crs, tmp_path):
    frame = _frame(crs=crs)  # a projected GeoJSON: GDAL writes the legacy 'crs' member, and reads it
    data = _file_bytes(frame, fmt, tmp_path)
    assert len(data) <= priors.DEFAULT_MAX_BYTES
    places = parse_places_file(data, f"upload.{ {'shapefile': 'zip'}.get(fmt, fmt) }")
    tol = 0.0 if (crs == "EPSG:4326" and fmt == "gpkg") else PROJECTED_TOL_DEG
    np.testing.assert_allclose(places.lon, LON, rtol=0, atol=tol)
    np.testing.assert_allclose(places.lat, LAT, rtol=0, atol=tol)
    np.testing.assert_array_equal(places.weight, WEIGHT)
    if crs == UTM:  # the file really held metres: nothing came back by accident
        assert np.abs(shapely.get_coordinates(frame.geometry.array)).min() > 1000


def test_multipoints_give_one_place_per_point_with_the_feature_weight(tmp_path):
    geoms = [shapely.MultiPoint(np.c_[LON[:3], LAT[:3]]), shapely.Point(LON[3], LAT[3])]
    frame = gpd.GeoDataFrame({"Weight": [2.0, 5.0]}, geometry=geoms, crs="EPSG:4326")  # the name in any case
    places = parse_places_file(_file_bytes(frame, "gpkg", tmp_path))
    np.testing.assert_array_equal(np.c_[places.lon, places.lat], np.c_[LON[:4], LAT[:4]])
    np.testing.assert_array_equal(places.weight, [2.0, 2.0, 2.0, 5.0])
    with pytest.raises(ValueError, match="The file has more than 3 places: keep at most 3 points"):
        parse_places_file(_file_bytes(frame, "geojson", tmp_path), max_rows=3)


def test_a_gis_upload_is_kept_and_reloaded_as_the_same_places(tmp_path):
    data = _file_bytes(_frame(crs=UTM), "gpkg", tmp_path)
    file_id, places = priors.save_places_upload(data, filename="mine.gpkg", folder=tmp_path / "store")
    assert priors.has_places_upload(file_id, folder=tmp_path / "store")
    assert priors.save_places_upload(data, folder=tmp_path / "store")[0] == file_id  # the same file, the same id
    back = priors.load_places_upload(file_id, folder=tmp_path / "store")
    np.testing.assert_array_equal(np.c_[back.lon, back.lat, back.weight], np.c_[places.lon, places.lat, places.weight])
    kept = (tmp_path / "store" / "places" / f"{file_id}.csv").read_bytes()
    assert kept.startswith(b"lat,lon,weight\n")  # the places read, not the GeoPackage: no GDAL on reload
    with pytest.raises(ValueError, match="not a GeoPackage"):
        priors.save_places_upload(b"not sqlite at all", filename="x.gpkg", folder=tmp_path / "store")


# ---------------------------------------------------------------------------------------------
# In: hostile files
# ---------------------------------------------------------------------------------------------


def test_a_zip_bomb_is_refused_from_its_directory():
    zeros = bytes(50_000_000)  # 50 MB of zeros deflate to about 50 kB
    bomb = _zip({"places.shp": zeros, "places.shx": b"", "places.dbf": b""})
    assert len(bomb) < 100_000
    with pytest.raises(ValueError, match=r"The zip unpacks to 50,000,000 bytes, more than the 1,000,000 accepted"):
        parse_places_file(bomb, "bomb.zip")


def _central_entry(data: bytes, name: str) -> int:
    """Offset of ``name``'s entry in the zip's central directory (its name follows 46 bytes of header)."""
    at = data.find(b"PK\x01\x02")
    while at >= 0:
        n = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + n] == name.encode():
            return at
        at = data.find(b"PK\x01\x02", at + 4)
    raise AssertionError(f"{name} has no central directory entry")


def test_a_zip_member_lying_about_its_size_stops_at_its_word(tmp_path):
    real = _file_bytes(_frame(), "shapefile", tmp_path)
    names = zipfile.ZipFile(io.BytesIO(real)).namelist()
    members = {n: zipfile.ZipFile(io.BytesIO(real)).read(n) for n in names}
    members["places/places.dbf"] += bytes(5_000_000)  # unpacks to 5 MB more than it will say
    data = bytearray(_zip(members))
    liar = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("places/places.dbf")
    small = liar.file_size - 5_000_000
    # Rewrite the uncompressed size in the member's local header (offset 22) and central directory entry (24).
    struct.pack_into("<I", data, liar.header_offset + 22, small)
    central = _central_entry(bytes(data), liar.filename)
    struct.pack_into("<I", data, central + 24, small)
    assert zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("places/places.dbf").file_size == small
    with pytest.raises(ValueError, match=r"The zip's file 'places/places.dbf' cannot be unpacked"):
        parse_places_file(bytes(data), "liar.zip")


@pytest.mark.parametrize(
    ("members", "sentence"),
    [
        (
            {"../../etc/places.shp": b"x", "a.shx": b"", "a.dbf": b""},
            "The zip holds a file named '../../etc/places.shp'",
        ),
        ({"/abs/places.shp": b"x"}, "which points outside the archive"),
        ({"C:\\places.shp": b"x"}, "which points outside the archive"),
        ({f"f{i}.txt": b"" for i in range(gis.MAX_ZIP_MEMBERS + 1)}, "The zip holds 33 files (at most 32"),
        ({"readme.txt": b"hello"}, "The zip holds 0 shapefiles: upload a zip of exactly one"),
        ({"a.shp": b"", "b.shp": b""}, "The zip holds 2 shapefiles ('a.shp', 'b.shp')"),
        ({"a.shp": b"", "a.dbf": b""}, "The zip has 'a.shp' but no .shx beside it"),
    ],
)
def test_zips_that_are_not_one_shapefile_get_a_sentence(members, sentence):
    with pytest.raises(ValueError, match=re.escape(sentence)):
        parse_places_file(_zip(members), "places.zip")


def test_a_million_features_are_cut_at_the_row_limit_without_reading_them(tmp_path, monkeypatch):
    path = tmp_path / "million.gpkg"
    pyogrio.write_dataframe(_frame()[:1], path, layer="places", driver="GPKG", SPATIAL_INDEX="NO")
    with sqlite3.connect(path) as con:
        con.execute(
            "WITH RECURSIVE c(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM c WHERE i < 1000000) "
            "INSERT INTO places(geom, weight) SELECT (SELECT geom FROM places WHERE fid = 1), 1.0 FROM c"
        )
    con.close()
    data = path.read_bytes()
    real_read, read = pyogrio.raw.read, []

    def counted_read(*args, **kwargs):  # what GDAL hands back: the features actually read
        out = real_read(*args, **kwargs)
        read.append(len(out[2]))
        return out

    monkeypatch.setattr(pyogrio.raw, "read", counted_read)
    with pytest.raises(ValueError, match=f"The file has more than {DEFAULT_MAX_ROWS:,} places: keep at most"):
        parse_places_file(data, "million.gpkg", max_bytes=len(data))
    assert read == [DEFAULT_MAX_ROWS + 1]  # one more than allowed, of a million
    # The default size limit refuses this file before GDAL is even asked.
    with pytest.raises(ValueError, match="The file is too large"):
        parse_places_file(data, "million.gpkg")
    assert read == [DEFAULT_MAX_ROWS + 1]


def test_lines_and_polygons_are_refused_not_guessed(tmp_path):
    square = shapely.box(LON[0], LAT[0], LON[0] + 0.01, LAT[0] + 0.01)
    frame = gpd.GeoDataFrame({"weight": [1.0, 1.0]}, geometry=[shapely.Point(LON[1], LAT[1]), square], crs=4326)
    with pytest.raises(ValueError, match="Feature 2 is a Polygon, not a point: places must be points"):
        parse_places_file(_file_bytes(frame, "geojson", tmp_path))
    line = gpd.GeoDataFrame(geometry=[shapely.LineString(np.c_[LON[:2], LAT[:2]])], crs=4326)
    with pytest.raises(ValueError, match="Feature 1 is a LineString, not a point"):
        parse_places_file(_file_bytes(line, "gpkg", tmp_path))


def test_a_file_without_crs_is_degrees_only_when_its_numbers_are(tmp_path):
    no_prj = _file_bytes(_frame(crs=UTM), "shapefile", tmp_path, drop=(".prj",))
    assert ".prj" not in " ".join(zipfile.ZipFile(io.BytesIO(no_prj)).namelist())
    with pytest.raises(
        ValueError, match=r"The file has no coordinate reference system and its coordinates are not deg"
    ):
        parse_places_file(no_prj, "places.zip")
    (tmp_path / "shp").rename(tmp_path / "shp-utm")
    in_degrees = parse_places_file(_file_bytes(_frame(), "shapefile", tmp_path, drop=(".prj",)))
    np.testing.assert_allclose(np.c_[in_degrees.lon, in_degrees.lat], np.c_[LON, LAT], rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("data", "name", "sentence"),
    [
        (RNG.bytes(5000), "places.gpkg", "The file 'places.gpkg' is not a GeoPackage (it does not begin like one)"),
        (b"SQLite format 3\x00" + RNG.bytes(5000), "places.gpkg", "The file cannot be read as a GeoPackage:"),
        (b"{" + RNG.bytes(3000), "x.geojson", "The file cannot be read as GeoJSON:"),
        (b'{"type": "FeatureCollection", "features": []}', "x.geojson", "The file (GeoJSON) has no places"),
        (b"PK\x03\x04" + RNG.bytes(3000), "x.zip", "The file is not a readable zip archive"),
        (b"not a zip", "places.zip", "The file 'places.zip' is not a zip archive"),
        (b"\x00\x00\x27\x0a", "places.shp", "'places.shp' is one part of a shapefile"),
    ],
    ids=["random.gpkg", "sqlite-garbage.gpkg", "brace.geojson", "empty.geojson", "pk-garbage.zip", "text.zip", "shp"],
)
def test_garbage_gets_a_sentence_not_gdal(data, name, sentence):
    with pytest.raises(ValueError, match=re.escape(sentence)) as caught:
        parse_places_file(data, name)
    assert "/tmp" not in str(caught.value) and "GDAL" not in str(caught.value)


def _feature_collection(rows: list[tuple[float, float, object]]) -> bytes:
    features = [
        {"type": "Feature", "properties": {"weight": w}, "geometry": {"type": "Point", "coordinates": [x, y]}}
        for x, y, w in rows
    ]
    return json.dumps({"type": "FeatureCollection", "features": features}).encode()


@pytest.mark.parametrize(
    ("rows", "csv_row"),
    [
        ([(13.2, 53.5, 1), (13.2, 95.0, 1)], "95,13.2,1"),
        ([(13.2, 53.5, 1), (193.5, 13.2, 1)], "13.2,193.5,1"),
        ([(13.2, 53.5, 1), (13.2, 53.5, -1)], "53.5,13.2,-1"),
        ([(13.2, 53.5, 1), (13.2, 53.5, "x")], "53.5,13.2,x"),
    ],
)
def test_values_get_the_csv_sentences(rows, csv_row):
    with pytest.raises(ValueError) as from_csv:
        parse_places_csv(f"lat,lon,weight\n53.5,13.2,1\n{csv_row}\n".encode())
    with pytest.raises(ValueError) as from_gis:
        parse_places_file(_feature_collection(rows), "places.geojson")
    # The same place (the second) gets the same sentence: "Line 3 has ..." in a CSV, "Feature 2 has ..." here.
    assert str(from_csv.value).startswith("Line 3 has ")
    assert str(from_gis.value) == str(from_csv.value).replace("Line 3 has ", "Feature 2 has ", 1)


def test_non_finite_coordinates_zero_weights_and_sizes_get_sentences(tmp_path):
    frame = gpd.GeoDataFrame(
        {"weight": [1.0, 1.0]}, geometry=gpd.points_from_xy([13.2, np.inf], [53.5, 53.6]), crs=4326
    )
    path = tmp_path / "inf.gpkg"
    pyogrio.write_dataframe(frame, path, driver="GPKG")
    with pytest.raises(ValueError, match=r"Feature 2 has x \(longitude\) 'inf', which is not a finite number"):
        parse_places_file(path.read_bytes())
    zero = _feature_collection([(13.2, 53.5, 0), (13.3, 53.5, 0)])
    with pytest.raises(ValueError, match="Every weight is zero: give at least one place a positive weight"):
        parse_places_file(zero)
    big = _file_bytes(_frame(), "gpkg", tmp_path)
    with pytest.raises(ValueError, match=rf"The file is too large \({len(big):,} bytes; at most 1,000 are accepted\)"):
        parse_places_file(big, max_bytes=1000)
    with pytest.raises(ValueError, match="The file has more than 10 places: keep at most 10 points"):
        parse_places_file(big, max_rows=10)
