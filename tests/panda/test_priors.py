"""Priors over the secret domain: road density, points of interest, snapping, uploaded places."""

from __future__ import annotations

import gzip
import importlib.util
import re

import numpy as np
import pytest

import panda
from panda.instance import PRIORS, make_instance
from panda.network import CITIES, EARTH_RADIUS_KM, RoadNetwork, haversine_km
from panda.priors import (
    DEFAULT_UNIFORM_SHARE,
    POI_DIR,
    list_poi_cities,
    load_pois,
    parse_places_csv,
    poi_weights,
    prior_for_records,
    record_prior,
    road_density_weights,
    snap_places,
)

M_PER_DEG = EARTH_RADIUS_KM * 1000.0 * np.pi / 180.0  # metres per degree of longitude on the equator


def equator_chain(n: int = 4, spacing_m: float = 100.0, *, two_way: bool = True, name: str = "chain") -> RoadNetwork:
    """``n`` nodes on the equator, ``spacing_m`` apart, joined in a straight line."""
    lon = np.arange(n) * spacing_m / M_PER_DEG
    u = np.arange(n - 1)
    v = u + 1
    if two_way:
        u, v = np.concatenate([u, v]), np.concatenate([v, u])
    return RoadNetwork(
        name=name,
        osm_id=np.arange(n, dtype=np.int64),
        lon=lon,
        lat=np.zeros(n),
        street_count=np.full(n, 2),
        edge_u=u,
        edge_v=v,
        edge_length_m=np.full(u.size, spacing_m),
    )


@pytest.fixture(scope="module")
def city() -> RoadNetwork:
    return panda.load_city("neubrandenburg")


# ---------------------------------------------------------------------------------------------
# Road density
# ---------------------------------------------------------------------------------------------


def test_road_density_exact_on_a_straight_chain():
    # Road [0, 300] m; disc of radius 150 m around x: the length of [x-150, x+150] inside it.
    w = road_density_weights(equator_chain(), radius_m=150.0)
    np.testing.assert_allclose(w, [150.0, 250.0, 250.0, 150.0], atol=1e-6)


def test_road_density_counts_a_segment_once_whatever_its_directions():
    two = road_density_weights(equator_chain(two_way=True), radius_m=150.0)
    one = road_density_weights(equator_chain(two_way=False), radius_m=150.0)
    np.testing.assert_array_equal(two, one)


def test_road_density_positive_and_larger_in_the_centre(city):
    w = road_density_weights(city)
    assert w.shape == (city.n_nodes,)
    assert np.all(w > 0)
    # Never more road within 300 m than the network holds, and a city centre is denser than its rim.
    adj = city.adjacency
    total_m = float(np.triu(adj.maximum(adj.T).toarray(), k=1).sum())
    assert w.max() <= total_m
    d_centre = haversine_km(city.lon, city.lat, np.median(city.lon), np.median(city.lat))
    inner, outer = d_centre < np.quantile(d_centre, 0.2), d_centre > np.quantile(d_centre, 0.8)
    assert w[inner].mean() > 1.5 * w[outer].mean()


@pytest.mark.parametrize("radius_m", [0, 5.0, 1001.0, float("nan")])
def test_road_density_rejects_a_bad_radius(radius_m):
    with pytest.raises(ValueError, match="'radius_m' parameter of road_density_weights"):
        road_density_weights(equator_chain(), radius_m=radius_m)


# ---------------------------------------------------------------------------------------------
# Snapping
# ---------------------------------------------------------------------------------------------


def test_snap_places_exact_on_a_tiny_network():
    net = equator_chain()  # nodes at 0, 100, 200, 300 m east
    lon_m = np.array([10.0, 140.0, 160.0, 290.0, 900.0, -30.0])
    lat_m = np.array([0.0, 20.0, 0.0, -5.0, 0.0, 0.0])
    weight = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 0.5])
    res = snap_places(net, lon_m / M_PER_DEG, lat_m / M_PER_DEG, weights=weight, max_snap_m=200.0)
    np.testing.assert_array_equal(res.index, [0, 1, 2, 3, -1, 0])
    np.testing.assert_allclose(res.weights, [1.5, 2.0, 3.0, 4.0])
    expected_m = [10.0, np.hypot(40.0, 20.0), 40.0, np.hypot(10.0, 5.0), 600.0, 30.0]
    np.testing.assert_allclose(res.distance_m, expected_m, rtol=1e-6)
    assert res.n_dropped == 1 and res.n_snapped == 5
    assert poi_weights(net, lon_m / M_PER_DEG, lat_m / M_PER_DEG, weights=weight, max_snap_m=200.0).tolist() == [
        1.5,
        2.0,
        3.0,
        4.0,
    ]


def test_snap_places_drops_and_counts_far_places(city):
    lon = np.array([city.lon[0], city.lon[0] + 0.5, city.lon[5], city.lon[5] - 1.0])
    lat = np.array([city.lat[0], city.lat[0], city.lat[5], city.lat[5]])
    res = snap_places(city, lon, lat)
    assert res.n_dropped == 2
    assert res.index[1] == -1 and res.index[3] == -1
    assert res.weights.sum() == 2.0
    # With no limit every place lands somewhere.
    assert snap_places(city, lon, lat, max_snap_m=np.inf).n_dropped == 0


def test_snap_places_to_an_instance_uses_its_records(city):
    inst = make_instance(city, n_records=30, n_outputs=10, n_users=5, seed=3)
    res = snap_places(inst, inst.lon, inst.lat, max_snap_m=1.0)
    np.testing.assert_array_equal(res.index, np.arange(30))
    assert res.weights.shape == (30,)


def test_snap_places_rejects_bad_input(city):
    with pytest.raises(TypeError, match="RoadNetwork .* or an Instance"):
        snap_places("neubrandenburg", [13.26], [53.56])
    with pytest.raises(ValueError, match="same length"):
        snap_places(city, [13.26, 13.27], [53.56])
    with pytest.raises(ValueError, match="not swapped"):
        snap_places(city, [13.26], [153.56])
    with pytest.raises(ValueError, match="finite numbers >= 0"):
        snap_places(city, [13.26], [53.56], weights=[-1.0])


# ---------------------------------------------------------------------------------------------
# Priors over X
# ---------------------------------------------------------------------------------------------


def test_record_prior_gives_a_record_the_mass_of_its_cell_and_a_uniform_share():
    net = equator_chain(6)  # nodes 0..5 at 0..500 m
    records = np.array([0, 5])  # nodes 1, 2 are nearer record 0; nodes 3, 4 nearer record 5
    mass = np.array([0.0, 2.0, 1.0, 1.0, 0.0, 0.0])
    p = record_prior(net, records, mass, uniform_share=0.1)
    np.testing.assert_allclose(p, [0.9 * 3 / 4 + 0.05, 0.9 * 1 / 4 + 0.05])
    # All the mass in one cell: the other record keeps exactly its uniform share.
    p = record_prior(net, records, np.array([0.0, 0, 0, 0, 0, 7.0]))
    np.testing.assert_allclose(p, [DEFAULT_UNIFORM_SHARE / 2, 1 - DEFAULT_UNIFORM_SHARE / 2])


@pytest.mark.parametrize("prior", PRIORS)
def test_every_named_prior_sums_to_one_and_is_positive(city, prior):
    inst = make_instance(city, n_records=200, n_outputs=50, n_users=20, prior=prior, seed=4)
    assert inst.prior.shape == (200,)
    assert inst.prior.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(inst.prior > 0)


def test_poi_prior_is_peaked_where_the_pois_are(city):
    k = 300
    poi = make_instance(city, n_records=k, n_outputs=50, n_users=20, prior="poi", seed=0).prior
    uniform_top = 0.1
    top = np.sort(poi)[::-1][: k // 10].sum()
    # The top decile of records holds several times the uniform share (measured 0.45 at seed 0).
    assert top > 3 * uniform_top
    # And the prior follows the POIs: records with more POIs within 300 m have a larger prior.
    inst = make_instance(city, n_records=k, n_outputs=50, n_users=20, prior="poi", seed=0)
    pois = load_pois("neubrandenburg")
    near = (haversine_km(inst.lon[:, None], inst.lat[:, None], pois.lon[None], pois.lat[None]) < 0.3).sum(axis=1)
    busy, quiet = near >= np.quantile(near, 0.9), near == 0
    assert quiet.any() and busy.any()
    assert inst.prior[busy].mean() > 5 * inst.prior[quiet].mean()
    # A record no POI snaps to keeps the uniform share only: unlikely, not impossible.
    assert inst.prior.min() == pytest.approx(DEFAULT_UNIFORM_SHARE / k)


def test_make_instance_poi_on_the_default_city_matches_prior_for_records(city):
    inst = make_instance(city, n_records=120, n_outputs=40, n_users=30, prior="poi", user_distribution="prior")
    np.testing.assert_allclose(inst.prior, prior_for_records(city, inst.records, "poi"))
    assert len(set(inst.users.tolist())) == 30


def test_make_instance_accepts_per_node_weights_from_an_upload(city):
    inst0 = make_instance(city, n_records=100, n_outputs=20, n_users=10, seed=5)
    target = inst0.records[17]
    # Three places a few metres from record 17 (drawn with the same seed, so the same records).
    csv = "Latitude;Longitude;Weight\n" + "\n".join(
        f"{city.lat[target] + d:.7f};{city.lon[target]:.7f};{w}".replace(".", ",")
        for d, w in ((0.00001, 1), (-0.00002, 2), (0.0, 3))
    )
    places = parse_places_csv(csv.encode())
    weights = poi_weights(city, places.lon, places.lat, weights=places.weight)
    inst = make_instance(city, n_records=100, n_outputs=20, n_users=10, prior=weights, seed=5)
    np.testing.assert_array_equal(inst.records, inst0.records)
    assert inst.prior[17] == pytest.approx(1 - DEFAULT_UNIFORM_SHARE + DEFAULT_UNIFORM_SHARE / 100)
    assert np.all(inst.prior > 0)


@pytest.mark.parametrize(
    ("prior", "match"),
    [
        (np.ones(5), "one weight per node"),
        (np.full(1328, -1.0), "finite numbers >= 0"),
        (np.zeros(1328), "all zero: no place lies on the network"),
        ("pois", "must be one of"),
        (3, "must be one of"),
    ],
)
def test_make_instance_rejects_a_bad_prior(city, prior, match):
    with pytest.raises(ValueError, match=match):
        make_instance(city, n_records=50, n_outputs=10, n_users=5, prior=prior)


def test_poi_prior_without_shipped_pois_says_what_to_do():
    net = equator_chain(name="bbox 0.0000,0.0000,0.0030,0.0001 drive")
    with pytest.raises(ValueError, match="no points of interest are shipped .* prior='road_density'"):
        make_instance(net, n_records=3, n_outputs=2, n_users=1, prior="poi")
    assert make_instance(net, n_records=3, n_outputs=2, n_users=1, prior="road_density").prior.sum() == (
        pytest.approx(1.0)
    )


# ---------------------------------------------------------------------------------------------
# Shipped points of interest
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CITIES))
def test_poi_file_exists_and_loads_for_every_embedded_city(name):
    assert (POI_DIR / f"{name}.csv.gz").is_file()
    assert name in list_poi_cities()
    pois = load_pois(name)
    assert len(pois) > 0
    w, s, e, n = panda.load_city(name).bbox.as_tuple()
    assert np.all((pois.lon >= w) & (pois.lon <= e) & (pois.lat >= s) & (pois.lat <= n))
    assert all(k.split("=", 1)[0] in ("amenity", "shop", "office") for k in pois.kind)
    with gzip.open(POI_DIR / f"{name}.csv.gz", "rt") as fh:
        assert fh.readline().strip() == "lon,lat,kind"
        assert sum(1 for _ in fh) == len(pois)


def test_load_pois_for_a_city_without_pois_says_what_to_do():
    with pytest.raises(ValueError, match="No points of interest are shipped for 'rome-paper'.*parse_places_csv"):
        load_pois("rome-paper")
    with pytest.raises(TypeError, match="'city' parameter of load_pois must be a str"):
        load_pois(None)


# ---------------------------------------------------------------------------------------------
# Uploaded places (CSV)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "lat,lon\n53.55,13.26\n53.56,13.27\n",
        "LON,Lat,name\n13.26,53.55,a\n13.27,53.56,b\n",
        "\ufefflatitude;longitude\n53,55;13,26\n\n53,56;13,27\n",
        'Latitude,Lng,weight\n"53.55","13.26",1\n53.56,13.27,1\n',
        "id,lat,long\n1,53.55,13.26\n2,53.56,13.27",
    ],
)
def test_parse_places_csv_reads_common_layouts(text):
    places = parse_places_csv(text.encode("utf-8"))
    np.testing.assert_allclose(places.lat, [53.55, 53.56])
    np.testing.assert_allclose(places.lon, [13.26, 13.27])
    np.testing.assert_allclose(places.weight, [1.0, 1.0])


def test_parse_places_csv_reads_weights():
    places = parse_places_csv(b"lat,lon,weight\n53.55,13.26,2.5\n53.56,13.27,0\n")
    np.testing.assert_allclose(places.weight, [2.5, 0.0])


@pytest.mark.parametrize(
    ("data", "sentence"),
    [
        (b"", "The file is empty: upload a CSV file with a header row 'lat,lon'"),
        (b"  \n\n", "The file is empty"),
        (b"latitude,x\n1,2\n", "The file has no 'lon' column (found: 'latitude', 'x'): the first row must name"),
        (b"a;b\n1;2\n", "The file has no 'lat' and 'lon' columns (found: 'a', 'b')"),
        (b"lat,lat,lon\n1,2,3\n", "The file has 2 latitude columns ('lat', 'lat'): keep only one."),
        (b"lat,lon\n", "The file has a header but no places: add one row per place"),
        (b"lat,lon\n53.5,13.2\n53.5,abc\n", "Line 3 has longitude 'abc', which is not a number"),
        (b"lat,lon\n53.5,13.2\n\n,13.2\n", "Line 4 has no latitude: fill it in or delete the line."),
        (b"lat,lon\nnan,13.2\n", "Line 2 has latitude 'nan', which is not a finite number"),
        (b"lat,lon\n13.2,193.5\n", "Line 2 has longitude 193.5, outside [-180, 180] degrees: write it in decimal"),
        (b"lat,lon\n95,13.2\n", "Line 2 has latitude 95, outside [-90, 90] degrees: check that the lat and lon"),
        (b"lat,lon,weight\n53.5,13.2,-1\n", "Line 2 has weight -1, which is negative: weights must be 0 or more."),
        (b"lat,lon,weight\n53.5,13.2,x\n", "Line 2 has weight 'x', which is not a number: write a number"),
        (b"lat,lon,weight\n53.5,13.2,0\n53.6,13.2,0\n", "Every weight is zero: give at least one place a positive"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "The file is not text (not UTF-8 CSV): save it as CSV UTF-8"),
        (b"lat,lon\n\xff\xfe53.5,13.2\n", "The file is not text"),
    ],
)
def test_parse_places_csv_errors_are_sentences(data, sentence):
    with pytest.raises(ValueError, match=re.escape(sentence)):
        parse_places_csv(data)


def test_parse_places_csv_bounds_the_work():
    big = b"lat,lon\n" + b"53.5,13.2\n" * 1000
    with pytest.raises(ValueError, match=r"The file is too large \(10,008 bytes; at most 5,000 are accepted\)"):
        parse_places_csv(big, max_bytes=5000)
    with pytest.raises(ValueError, match="The file has more than 999 places: keep at most 999 rows"):
        parse_places_csv(big, max_rows=999)
    assert len(parse_places_csv(big, max_rows=1000)) == 1000
    blank = b"lat;lon\n" + b";\n" * 3000 + b"53.5;13.2\n"  # rows of nothing are rows read too
    with pytest.raises(ValueError, match="more than 2,001 rows, most of them empty"):
        parse_places_csv(blank, max_rows=1000)
    assert len(parse_places_csv(b"lat;lon\n" + b";\n" * 1000 + b"53.5;13.2\n", max_rows=1000)) == 1
    with pytest.raises(TypeError, match="must be the file's bytes"):
        parse_places_csv("lat,lon\n1,2\n")


@pytest.mark.slow
def test_make_pois_regenerates_the_shipped_files_byte_for_byte(tmp_path):
    spec = importlib.util.spec_from_file_location("make_pois", POI_DIR.parent / "make_pois.py")
    if importlib.util.find_spec("osmium") is None:
        pytest.skip("PyPI osmium (requirements.txt) is not installed")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [f for f, _ in module.RAW_FILES.values() if not (module.DEFAULT_RAW_DIR / f).is_file()]
    if missing:
        pytest.skip(f"raw OSM extracts not present in {module.DEFAULT_RAW_DIR}: {missing}")
    assert module.main(["--out-dir", str(tmp_path)]) == 0
    for name in CITIES:
        assert (tmp_path / f"{name}.csv.gz").read_bytes() == (POI_DIR / f"{name}.csv.gz").read_bytes(), name


def test_the_poi_prior_reaches_the_optimiser_and_the_attacker_not_the_mechanism(city):
    from panda.audit import adversary_error_m
    from panda.mechanisms import build_em, build_em_br, expected_loss_m

    uniform = make_instance(city, n_records=200, n_outputs=60, prior="uniform", seed=1)
    poi = make_instance(city, n_records=200, n_outputs=60, prior="poi", seed=1)
    np.testing.assert_array_equal(uniform.records, poi.records)
    eps_per_km = 0.5
    # The EM (its guarantee) is the same whatever the prior.
    em = build_em(poi, eps_per_km).matrix
    np.testing.assert_array_equal(em, build_em(uniform, eps_per_km).matrix)
    # The Bayes attacker who knows where people go errs less (measured 1600 m vs 2189 m at seed 1).
    d_m = poi.d_km * 1000.0
    assert adversary_error_m(em, poi.prior, d_m) < 0.9 * adversary_error_m(em, uniform.prior, d_m)
    # EM+BR remaps for the prior it is given: under the POI prior its remap beats the uniform one's
    # (the Bayesian remap is the best post-processing for its prior; measured 1350 m vs 1655 m).
    br_poi = build_em_br(poi, eps_per_km).matrix
    br_uniform = build_em_br(uniform, eps_per_km).matrix
    assert expected_loss_m(poi, br_poi) < expected_loss_m(poi, br_uniform)


def test_uploaded_places_are_kept_under_their_id_and_bounded(tmp_path, monkeypatch):
    from panda import priors

    data = b"lat,lon,weight\n53.557,13.261,2\n53.560,13.270,1\n"
    file_id, places = priors.save_places_upload(data, folder=tmp_path)
    assert len(file_id) == 16 and places.lon.size == 2
    assert priors.save_places_upload(data, folder=tmp_path)[0] == file_id  # the same file, the same id
    back = priors.load_places_upload(file_id, folder=tmp_path)
    np.testing.assert_array_equal(back.lat, places.lat)
    np.testing.assert_array_equal(back.weight, [2.0, 1.0])
    with pytest.raises(ValueError, match="not kept on this server"):
        priors.load_places_upload("0" * 16, folder=tmp_path)
    with pytest.raises(ValueError, match="16 hexadecimal digits"):
        priors.load_places_upload("../../etc/passwd", folder=tmp_path)
    with pytest.raises(ValueError):  # a bad file is refused and not kept
        priors.save_places_upload(b"x,y\n1,2\n", folder=tmp_path)
    monkeypatch.setattr(priors, "PLACES_STORE_MAX_FILES", 3)
    for i in range(5):
        priors.save_places_upload(f"lat,lon\n53.5{i},13.2\n".encode(), folder=tmp_path)
    assert len(list((tmp_path / "places").glob("*.csv"))) == 3
