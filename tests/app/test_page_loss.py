"""The loss function in the dashboard: per-page defaults, the sidebar, the link, the numbers shown."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_support import clear_caches, make_app, metric, release_resources, run_ok  # noqa: F401 (fixtures)

import panda
from app.model import lesson_numbers
from app.model.panda_numbers import fmt_m
from app.model.params import Params, from_query, to_query
from panda.mechanisms import build_em


def test_the_loss_lives_in_the_link():
    p, problems = from_query({"loss": "straight", "tasks": "3", "prior": "street_count"})
    assert problems == []
    assert (p.loss, p.n_tasks, p.prior) == ("straight", 3, "street_count")
    assert to_query(p)["loss"] == "straight" and to_query(p)["tasks"] == "3"
    assert from_query(to_query(p))[0] == p
    # The page's default is not written into the link: the same link keeps each page's default.
    assert "loss" not in to_query(Params())
    bad, problems = from_query({"loss": "euclid", "tasks": "99", "prior": "everyone"})
    assert (bad.loss, bad.n_tasks, bad.prior) == ("auto", 1, "uniform")
    assert len(problems) == 3 and all("ignored" in m for m in problems)


def test_auto_resolves_to_the_page_default_and_keys_the_instance():
    lesson_view = Params(page_loss="road")
    assert lesson_view.resolved_loss == "road"
    assert Params(page_loss="road", loss="task", n_tasks=4).instance_key[5:7] == ("task", 4)
    # The other losses read no task: their instances do not depend on the task count.
    assert Params(page_loss="road", n_tasks=4).instance_key == Params(page_loss="road", n_tasks=1).instance_key


def _em_error_at(loss: str, place: int) -> float:
    inst = panda.make_instance(
        panda.load_city("neubrandenburg"), n_records=200, n_users=12, n_outputs=50, seed=0, loss=loss
    )
    return lesson_numbers.expected_error_m(build_em(inst, 5.0).matrix[place], inst.cost_m[place])


def test_the_lessons_default_loss_is_the_road_distance():
    at = make_app(mech="em")
    run_ok(at)
    assert at.selectbox(key="w_loss").value == "auto"
    place = int(at.session_state["lesson_a"])
    # "Error at A" is EM's expected road distance from A to its report, computed here again.
    assert metric(at, "Error at A") == fmt_m(_em_error_at("road", place))
    assert metric(at, "Error at A") != fmt_m(_em_error_at("task", place))
    helps = [m.proto.help for m in at.metric if m.label == "Error at A"]
    assert "along the roads" in helps[0]
    assert any("road distance from the place to its report" in c.value for c in at.caption)


@pytest.mark.parametrize("loss", ["straight", "task"])
def test_a_chosen_loss_changes_the_lessons_numbers(loss):
    at = make_app(mech="em", loss=loss)
    run_ok(at)
    place = int(at.session_state["lesson_a"])
    assert metric(at, "Error at A") == fmt_m(_em_error_at(loss, place))


def test_the_panda_page_keeps_the_papers_task_cost():
    at = make_app("app_pages/explore.py")
    run_ok(at)
    assert at.selectbox(key="w_loss").value == "auto"
    assert "the paper's task cost" in at.selectbox(key="w_loss").format_func("auto")
    assert at.number_input(key="w_tasks").value == 1  # the task count is offered under the task cost only


def test_the_prior_changes_what_the_attacker_knows():
    at = make_app(mech="em", prior="street_count")
    run_ok(at)
    inst = panda.make_instance(
        panda.load_city("neubrandenburg"), n_records=200, n_users=12, n_outputs=50, seed=0, prior="street_count"
    )
    from panda.audit import adversary_error_m

    expected = adversary_error_m(build_em(inst, 5.0).matrix, inst.prior, inst.d_km * 1000.0)
    assert metric(at, "Attacker") == fmt_m(expected)
    assert not np.allclose(inst.prior, 1 / 200)


# --------------------------------------------------------------------------------------------
# Priors, uploaded places, repeated reports and background knowledge in the Lesson
# --------------------------------------------------------------------------------------------

CITY = "neubrandenburg"


def _instance(**kw):
    return panda.make_instance(panda.load_city(CITY), n_records=200, n_users=12, n_outputs=50, seed=0, **kw)


@pytest.fixture
def places_store(tmp_path, monkeypatch):
    from panda.network import folders

    monkeypatch.setattr(folders, "CACHE_DIR", tmp_path)
    return tmp_path


def test_uploaded_places_become_the_prior_from_a_link(places_store):
    from panda.audit import adversary_error_m

    net = panda.load_city(CITY)
    lon, lat = net.lon[[10, 400, 900]], net.lat[[10, 400, 900]]
    rows = "".join(f"{b},{a},{w}\n" for a, b, w in zip(lon, lat, (5, 1, 1), strict=True))
    data = ("lat,lon,weight\n" + rows).encode()
    file_id, _ = panda.priors.save_places_upload(data)
    at = run_ok(make_app(mech="em", prior=f"csv:{file_id}"))
    assert at.selectbox(key="w_prior").value == f"csv:{file_id}"
    inst = _instance(prior=panda.poi_weights(net, lon, lat, weights=np.array([5.0, 1.0, 1.0])))
    expected = adversary_error_m(build_em(inst, 5.0).matrix, inst.prior, inst.d_km * 1000.0)
    assert metric(at, "Attacker") == fmt_m(expected)


def test_a_link_to_places_this_server_does_not_keep_falls_back_to_uniform(places_store):
    at = run_ok(make_app(prior="csv:0123456789abcdef"))
    assert at.selectbox(key="w_prior").value == "uniform"
    assert any("not kept on this server" in e.value for e in at.sidebar.error)


def test_many_reports_tab_shows_the_measured_fall_and_the_budget():
    from panda.repeated import attacker_error_vs_k

    at = run_ok(make_app(mech="em", ltab="reports", k="10"))
    assert at.slider(key="lesson_k").value == 10
    inst = _instance(loss="road")
    res = attacker_error_vs_k(build_em(inst, 5.0).matrix, inst.prior, inst.d_km * 1000.0, epsilon_per_km=5.0, rng=0)
    text = " ".join(m.value for m in at.markdown)
    assert f"**{fmt_m(res.error_m[9])}**" in text  # the page's number is the library's, same sequences
    assert f"against {fmt_m(res.single_report_error_m)} after one" in text
    assert "50/km" in text  # 10 x 5/km, spelled out
    assert res.error_m[9] < res.single_report_error_m


def test_a_link_with_k_out_of_range_is_refused_and_said():
    at = make_app(k="99")
    at.run()
    assert not at.exception
    assert any("'k=99' is not a number of reports from 1 to 20" in t.value for t in at.warning)


def test_the_attacker_after_k_reports_on_the_map():
    at = run_ok(make_app(mech="em", view="attacker", k="10"))
    assert any("10 independent reports" in c.value for c in at.caption)


def test_background_view_compares_the_attacker_with_and_without_the_prior():
    from panda.audit import adversary_error_m

    at = run_ok(make_app(mech="em", ltab="prior"))
    inst = _instance(loss="road")
    matrix = build_em(inst, 5.0).matrix
    poi = panda.priors.prior_for_records(inst.network, inst.records, "poi")
    d = inst.d_km * 1000.0
    naive = adversary_error_m(matrix, poi, d, attacker_prior=inst.prior)  # people follow the POIs
    knowing = adversary_error_m(matrix, poi, d)
    assert knowing < naive
    assert metric(at, "Naive attacker") == fmt_m(naive)
    assert metric(at, "Informed attacker") == fmt_m(knowing)
    assert any("Same mechanism, same ε" in m.value for m in at.markdown)
    # Issue 39 item 6: the tab names the prior its people follow, and that it is not the view's (uniform) one.
    assert (
        "**This tab assumes people go where *points of interest (shops, amenities, offices)* says**, not the view's "
        "prior (*uniform*) that the other numbers use." in [m.value for m in at.markdown]
    )


@pytest.mark.parametrize("key", ["K", "N", "M", "seed", "Gamma", "tasks"])
@pytest.mark.parametrize("raw", ["inf", "-inf", "1e999", "nan"])
def test_a_link_with_an_infinite_whole_number_is_refused_not_raised(key, raw):
    p, problems = from_query({key: raw})
    assert p == Params()
    assert problems and problems[0].startswith(f"'{key}={raw}'") and problems[0].endswith("ignored.")
