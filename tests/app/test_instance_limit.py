"""Instances bounded in the dashboard (issue 38, item 3): a view over the limit is a sentence, and the instance is
built on a worker and kept once for every session.

No link the controls allow exceeds the limit on an embedded city (tests/panda/test_instance_footprint.py checks
the largest ones, and the refusal itself on a synthetic 300,000-node network), so the page tests lower the limit
(``panda.instance.MAX_DENSE_BYTES``, read when the view is checked) below the small view of their link instead.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("streamlit")

import apptest_support as support  # noqa: E402
from apptest_support import SMALL, clear_caches, release_resources  # noqa: E402, F401 (autouse fixtures)

import panda  # noqa: E402
import panda.instance  # noqa: E402

#: Below the small view's tables (K = 200, M = 50: about 2 MB).
LOW_LIMIT = 1_000_000
SENTENCE_END = "the limit is 1 MB: choose fewer places, fewer outputs, or a smaller area."


def _errors(at) -> list[str]:
    return [e.value for e in at.error]


def test_the_lesson_says_the_sentence_and_stops(monkeypatch):
    monkeypatch.setattr(panda.instance, "MAX_DENSE_BYTES", LOW_LIMIT)
    at = support.run_ok(support.make_app(None))
    errors = _errors(at)
    assert len(errors) == 1 and "This view needs about 2 MB of distance tables (K = 200, M = 50" in errors[0], errors
    assert SENTENCE_END in errors[0]
    assert not at.get("deck_gl_json_chart")  # the page stopped: no map


def test_explore_says_the_sentence_alone_and_stops(monkeypatch):
    monkeypatch.setattr(panda.instance, "MAX_DENSE_BYTES", LOW_LIMIT)
    at = support.run_ok(support.make_app("app_pages/explore.py", loss="task", tasks="3"))
    errors = _errors(at)
    assert len(errors) == 1, errors
    assert errors[0].startswith("**This view is too large for the dashboard.** This view needs about 2 MB"), errors
    assert "(K = 200, M = 50, 3 tasks on a network of 1,328 nodes)" in errors[0] and errors[0].endswith(SENTENCE_END)
    assert not any(c.value.startswith("Details:") for c in at.caption)  # the sentence is plain: no class name
    assert not at.metric  # the page stopped before PAnDA's numbers


def _poisoned(*_args, **_kwargs):
    msg = "the instance's distance tables were built in the web server process"
    raise AssertionError(msg)


def test_the_instance_is_built_on_a_worker_and_kept_once_for_every_session(monkeypatch):
    """The server poisons the loss table's builder in its own process: the instance still comes, from a worker,
    equal to a direct build, on the server's own network, and every call gets the same object (no copy per
    session)."""
    from app import state
    from app.model.params import Params

    view = Params(
        n_records=int(SMALL["K"]), n_users=int(SMALL["N"]), n_outputs=int(SMALL["M"]), seed=5, page_loss="road"
    ).instance_key
    net = state.network(view[0])
    expected = panda.make_instance(net, n_records=200, n_users=12, n_outputs=50, seed=5, loss="road")
    monkeypatch.setattr(panda.instance, "_loss_m", _poisoned)
    inst = state.instance(*view)
    for name in ("records", "outputs", "prior", "users", "tasks", "task_weights", "cost_m"):
        assert np.array_equal(getattr(inst, name), getattr(expected, name)), name
    assert inst.network is net
    assert state.instance(*view) is inst


def test_the_kept_instances_are_bounded_by_their_bytes(monkeypatch):
    """With a budget that holds one small view, a second view drops the first from the server's cache (the next
    call builds it again: a new object), while the view in use is kept whatever its size."""
    from app import state
    from app.model.params import Params
    from app.server.instance_budget import InstanceBudget

    def view(seed: int) -> tuple:
        return Params(n_records=200, n_users=12, n_outputs=50, seed=seed, page_loss="road").instance_key

    net = state.network(view(0)[0])
    one = panda.instance.instance_footprint(net.n_nodes, 200, 50, loss="road")
    monkeypatch.setattr(state, "_INSTANCE_BYTES", InstanceBudget(int(1.5 * one), max_entries=state.MAX_INSTANCES))
    first = state.instance(*view(1))
    assert state.instance(*view(1)) is first and state._INSTANCE_BYTES.total_bytes == one
    second = state.instance(*view(2))
    assert state._INSTANCE_BYTES.total_bytes == one  # the first was dropped to keep the second
    assert state.instance(*view(2)) is second
    again = state.instance(*view(1))
    assert again is not first and np.array_equal(again.cost_m, first.cost_m)  # built again, the same numbers

    monkeypatch.setattr(state, "_INSTANCE_BYTES", InstanceBudget(one // 2, max_entries=state.MAX_INSTANCES))
    alone = state.instance(*view(3))  # larger than the whole budget: kept while in use
    assert state.instance(*view(3)) is alone


def test_the_budget_ledger_drops_the_least_recently_used_first():
    from app.server.instance_budget import InstanceBudget

    budget = InstanceBudget(100, max_entries=3)
    assert budget.use("a", 40) == [] and budget.use("b", 40) == []
    assert budget.use("a", 40) == []  # a used again: b is now the oldest
    assert budget.use("c", 40) == ["b"] and budget.keys() == ["a", "c"]
    assert budget.use("d", 10) == [] and budget.use("e", 10) == []  # over max_entries: a forgotten, not named
    assert budget.keys() == ["c", "d", "e"] and budget.total_bytes == 60
    assert budget.use("huge", 1000) == ["d", "e"] and budget.keys() == ["huge"]  # c beyond max_entries: forgotten
