"""Which of the guided lesson's scenes are ready before class (no streamlit).

A scene is *ready* when everything it shows that takes longer than seconds is in the result store, where
``python -m panda prepare`` (the presenter's *Prepare* button) puts it: the mechanisms' matrices at the view's ε
and the trade-off curves. A scene with nothing to prepare (PAnDA's run takes seconds and is not kept) is ready.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.model.lesson_numbers import REPEATED_MECHANISMS
from app.model.lesson_scenes import SCENES
from app.model.params import Params
from app.server.prepare import LESSON_MECHANISMS, Task, is_done

__all__ = ["SceneReadiness", "scene_tasks", "readiness", "ready_line"]


@dataclass(frozen=True)
class SceneReadiness:
    """One scene: how many of its stored results exist, of how many it needs."""

    key: str
    title: str
    done: int
    needed: int

    @property
    def ready(self) -> bool:
        return self.done == self.needed


def scene_tasks(params: Params, mechanism: str) -> dict[str, list[Task]]:
    """The stored results each scene shows, for the view ``params`` and the scenes' mechanism."""
    from panda.tradeoff import DEFAULT_METHODS

    key, eps = params.instance_key, float(params.epsilon_per_km)

    def matrices(*names: str) -> list[Task]:
        return [Task("mechanism", key, n, eps) for n in dict.fromkeys(names) if n in LESSON_MECHANISMS]

    shown = matrices(mechanism)
    return {
        "promise": matrices("laplace"),  # the promise scene always shows planar Laplace
        "cost": shown,
        "attacker": shown,
        "round": shown,
        "background": shown,
        "repeated": matrices(*REPEATED_MECHANISMS, mechanism),
        "curve": [Task("curve", key, m) for m in dict.fromkeys((*DEFAULT_METHODS, "lp"))],
        "panda": [],
    }


def readiness(
    params: Params, mechanism: str, *, network_of: Callable[[str], object] | None = None
) -> list[SceneReadiness]:
    """Every scene's readiness, in the lesson's order (each stored result looked up once)."""
    tasks = scene_tasks(params, mechanism)
    seen: dict[Task, bool] = {}
    out = []
    for scene in SCENES:
        needed = tasks[scene.key]
        for task in needed:
            if task not in seen:
                seen[task] = is_done(task, params, network_of)
        out.append(SceneReadiness(scene.key, scene.title, sum(seen[t] for t in needed), len(needed)))
    return out


def ready_line(rows: list[SceneReadiness]) -> str:
    """ "6 of 8 scenes ready · to prepare: 3. The attacker, 7. Privacy against error, ..."."""
    n_ready = sum(r.ready for r in rows)
    line = f"{n_ready} of {len(rows)} scenes ready"
    missing = [f"{i + 1}. {r.title}" for i, r in enumerate(rows) if not r.ready]
    return line + (f" · to prepare: {', '.join(missing)}" if missing else "")
