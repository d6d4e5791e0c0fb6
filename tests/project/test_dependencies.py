"""The project declares what it imports, and the locks pin it with hashes (issue 29, item 5).

* every third-party module that panda/ and app/ import is a distribution pyproject.toml names (the library's
  dependencies, or the dashboard's ``app`` extra), found through ``importlib.metadata.packages_distributions``;
* requirements.txt pins every one of them, and requirements.lock / requirements-dev.lock pin the same versions,
  every package with its sha256 hashes, as the Dockerfile and .ci/run install them (``--require-hashes``).
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

SOURCES = ("panda", "app")
LOCAL = {"panda", "app"}
#: Calls that import a module named by a string: importlib.import_module("x"), importlib.util.find_spec("x").
_DYNAMIC = {"import_module", "find_spec", "__import__"}


def imported_modules(folder: Path) -> dict[str, set[str]]:
    """Top-level module name -> the files importing it (every import statement, also inside functions)."""
    found: dict[str, set[str]] = {}
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in _DYNAMIC and isinstance(node.args[0].value, str):
                    names = [node.args[0].value]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def third_party_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in SOURCES:
        for name, files in imported_modules(ROOT / folder).items():
            if name not in sys.stdlib_module_names and name not in LOCAL and not name.startswith("_"):
                found.setdefault(name, set()).update(files)
    return found


def _with_extras(requirement: Requirement) -> set[str]:
    """The requirement's distribution and those its extras add (dask[distributed] -> dask, distributed)."""
    names = {canonicalize_name(requirement.name)}
    for line in md.requires(requirement.name) or []:
        dep = Requirement(line)
        if dep.marker and any(dep.marker.evaluate({"extra": extra}) for extra in requirement.extras):
            names.add(canonicalize_name(dep.name))
    return names


def declared() -> tuple[set[str], set[str]]:
    """(runtime, app extra) distribution names of pyproject.toml, extras' additions included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = set().union(*(_with_extras(Requirement(r)) for r in project["dependencies"]))
    app = set().union(*(_with_extras(Requirement(r)) for r in project["optional-dependencies"]["app"]))
    return runtime, app


def pins(path: Path) -> dict[str, str]:
    """name -> version of every ``name==version`` line of a requirements or lock file."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            out[canonicalize_name(m.group(1))] = m.group(3)
    return out


def test_the_walk_sees_the_imports_it_should():
    """The AST walk itself: it finds imports at module level, inside functions, and by name in find_spec."""
    found = third_party_imports()
    assert {"numpy", "scipy", "streamlit", "osmium", "distributed", "PIL", "sqlalchemy"} <= set(found), found
    assert "panda/network/files.py" in found["osmium"] and "app/model/export_files.py" in found["kaleido"]
    assert not {"json", "panda", "app", "os"} & set(found)


def test_every_third_party_import_is_declared_in_pyproject():
    modules = md.packages_distributions()
    runtime, app = declared()
    missing = []
    for name, files in sorted(third_party_imports().items()):
        dists = {canonicalize_name(d) for d in modules.get(name, [])}
        assert dists, f"{name} (imported by {sorted(files)}) belongs to no installed distribution"
        where = runtime if all(f.startswith("panda/") for f in files) else runtime | app
        if not dists & (runtime | app):
            missing.append(f"{name} ({'/'.join(sorted(dists))}) imported by {sorted(files)}")
        elif not dists & where:
            missing.append(f"{name} is only in the app extra but the library imports it: {sorted(files)}")
    assert not missing, "not declared in pyproject.toml:\n" + "\n".join(missing)


def test_pyproject_and_requirements_agree():
    """Every distribution pyproject names is pinned in requirements.txt, at a version the declaration allows."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    pinned = pins(ROOT / "requirements.txt")
    for line in project["dependencies"] + project["optional-dependencies"]["app"]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{line} is not pinned in requirements.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (line, pinned[name])


# --------------------------------------------------------------------------------------------
# The locks
# --------------------------------------------------------------------------------------------

LOCKS = {"runtime": ("requirements.lock", "requirements.txt"), "dev": ("requirements-dev.lock", "requirements-dev.txt")}


def entries(path: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of a hashed lock file (an entry spans its continuation lines)."""
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)\s*(.*)$", line)
        if m:
            hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", m.group(3))
            out[canonicalize_name(m.group(1))] = (m.group(2), hashes)
    return out


@pytest.mark.parametrize("kind", LOCKS)
def test_the_lock_pins_every_package_with_hashes(kind):
    lock_name, source_name = LOCKS[kind]
    lock = ROOT / lock_name
    text = lock.read_text(encoding="utf-8")
    header = "\n".join(text.splitlines()[:15])  # the command that regenerates the lock, at its top
    assert "pip-compile" in header and "--generate-hashes" in header, header
    assert f"--output-file={lock_name}" in header and source_name in header, header
    found = entries(lock)
    assert len(found) >= 40, len(found)
    for name, (version, hashes) in found.items():
        assert hashes, f"{name}=={version} has no hash"
    # Every line is an entry, its hashes, or a comment: nothing --require-hashes would refuse.
    for line in text.replace("\\\n", " ").splitlines():
        assert not line.strip() or line.lstrip().startswith("#") or re.match(r"^[A-Za-z0-9]", line), line
        assert not re.search(r"^-e |git\+|file:|https?://", line.split("#")[0]), line
    # What requirements.txt (and -dev) pin, the lock pins at the same version.
    for name, version in pins(ROOT / source_name).items():
        assert name in found and found[name][0] == version, (name, version, found.get(name))


def test_the_dev_lock_has_the_runtime_lock_in_it():
    """The tests (CI installs the dev lock) run on the very versions the Docker image installs."""
    runtime, dev = entries(ROOT / "requirements.lock"), entries(ROOT / "requirements-dev.lock")
    different = {n: (v, dev.get(n, ("missing",))[0]) for n, (v, _) in runtime.items() if dev.get(n, ("",))[0] != v}
    assert not different, different
    assert all(set(runtime[n][1]) == set(dev[n][1]) for n in runtime)


def test_the_installers_require_hashes():
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"pip install [^\n]*--require-hashes --no-deps -r requirements\.lock", dockerfile), dockerfile
    assert "COPY requirements.lock" in dockerfile
    # The base image by digest (a tag moves), with the command that refreshes it said beside it.
    (base,) = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.11-slim-bookworm@sha256:[0-9a-f]{64}", base), base
    assert "docker buildx imagetools inspect python:3.11-slim-bookworm" in dockerfile
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (pip_line,) = [line for line in ci.splitlines() if "pip install" in line and not line.lstrip().startswith("#")]
    assert "--require-hashes" in pip_line and "-r requirements-dev.lock" in pip_line, pip_line


# --------------------------------------------------------------------------------------------
# What a code path needs although no file of ours imports it (issue 36)
# --------------------------------------------------------------------------------------------

#: Distributions that a dependency imports only on a path our code takes: (the distribution, a file of ours,
#: the text there that takes the path). The static walk above cannot see them; a clean venv would fail on them.
CODE_PATH_NEEDS = (
    ("cryptography", "panda/execution/cluster.py", "Security.temporary()"),  # distributed's TLS certificate
    ("choreographer", "app/model/export_files.py", "kaleido"),  # kaleido 1 drives Chromium through it
    ("psycopg-binary", "app/server/db/store.py", "postgresql"),  # psycopg[binary]'s compiled driver
)


@pytest.mark.parametrize(("dist", "path", "use"), CODE_PATH_NEEDS)
def test_what_a_code_path_needs_is_declared_and_locked(dist, path, use):
    assert use in (ROOT / path).read_text(encoding="utf-8"), f"{path} no longer uses {use}: update the list"
    runtime, app = declared()
    assert canonicalize_name(dist) in runtime | app, f"{dist} is not declared in pyproject.toml"
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    named = {canonicalize_name(Requirement(line).name) for line in text.splitlines() if re.match(r"^[A-Za-z]", line)}
    named |= {canonicalize_name(n) for r in text.splitlines() if re.match(r"^[A-Za-z]", r) for n in _extras_of(r)}
    assert canonicalize_name(dist) in named, f"{dist} is not named in requirements.txt"
    assert canonicalize_name(dist) in entries(ROOT / "requirements.lock"), f"{dist} is not in requirements.lock"
    assert md.version(dist), dist


def _extras_of(line: str) -> set[str]:
    """Distributions a requirement line brings through its extras (psycopg[binary] -> psycopg-binary)."""
    requirement = Requirement(line.split("#")[0].strip())
    return _with_extras(requirement) - {canonicalize_name(requirement.name)}


def _dev_imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    local = LOCAL | {p.stem for folder in ("tests", "bench") for p in (ROOT / folder).rglob("*.py")} | {"tests"}
    for folder in ("tests", "bench", "experiments"):
        for name, files in imported_modules(ROOT / folder).items():
            if name not in sys.stdlib_module_names and name not in local and not name.startswith("_"):
                found.setdefault(name, set()).update(files)
    return found


def test_tests_and_benchmarks_import_only_what_the_requirements_name():
    """tests/, bench/ and experiments/ import distributions requirements.txt or requirements-dev.txt name directly
    (one that came only as another's dependency may go away with it)."""
    modules = md.packages_distributions()
    named: set[str] = set()
    for source in ("requirements.txt", "requirements-dev.txt"):
        for line in (ROOT / source).read_text(encoding="utf-8").splitlines():
            if re.match(r"^[A-Za-z]", line):
                requirement = Requirement(line.split("#")[0].strip())
                named |= {canonicalize_name(requirement.name)} | _extras_of(line)
    missing = []
    for name, files in sorted(_dev_imports().items()):
        dists = {canonicalize_name(d) for d in modules.get(name, [])}
        if not dists & named:
            missing.append(f"{name} ({'/'.join(sorted(dists)) or 'no distribution'}) imported by {sorted(files)[:3]}")
    assert not missing, "not named in requirements.txt or requirements-dev.txt:\n" + "\n".join(missing)


def test_ci_runs_the_tests_in_a_venv_of_its_own():
    """.ci/run makes a fresh venv without the machine's site-packages and runs the README's test command in it."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    code = "\n".join(line for line in ci.splitlines() if not line.lstrip().startswith("#"))
    assert re.search(r'-m venv "\$venv"', code) and "system-site-packages" not in code, code
    assert code.index("-m venv") < code.index("pip install") < code.index("python -m pytest -q")
    assert 'PATH="$PWD/$venv/bin:$PATH"' in code and "pip check" in code
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "python -m pytest -q" in readme


# --------------------------------------------------------------------------------------------
# The layers (issue 37): the library on its own, figures and model without streamlit
# --------------------------------------------------------------------------------------------


def _imports_of(path: Path) -> set[str]:
    """Every module a file imports (full dotted names, also inside functions and by name in import_module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _DYNAMIC:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
                elif isinstance(arg, ast.Name):  # a module-level constant naming the module
                    names.add(f"<constant {arg.id}>")
    return names


def _forbidden(folder: str, prefixes: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = sorted(n for n in _imports_of(path) if n.split(".")[0] in prefixes)
        if bad:
            found[str(path.relative_to(ROOT))] = bad
    return found


def test_the_library_never_imports_the_dashboard_or_streamlit():
    found = _forbidden("panda", ("app", "streamlit", "pydeck"))
    assert not found, f"panda/ imports the dashboard: {found}"
    # The one way round: `panda prepare` loads the dashboard's module by the name of one constant, at run time.
    from panda import cli

    assert (
        cli.DASHBOARD_PREPARE.startswith("app.")
        and (ROOT / (cli.DASHBOARD_PREPARE.replace(".", "/") + ".py")).is_file()
    )
    loaders = {str(p.relative_to(ROOT)) for p in (ROOT / "panda").rglob("*.py") if "<constant" in str(_imports_of(p))}
    assert loaders == {"panda/cli.py"}, loaders


@pytest.mark.parametrize("layer", ["app/figures", "app/model"])
def test_figures_and_model_never_import_streamlit(layer):
    found = _forbidden(layer, ("streamlit",))
    assert not found, f"{layer} imports streamlit: {found}"
    pages = _forbidden(layer, ("app",))
    upward = {
        f: [n for n in names if n.startswith(("app.widgets", "app.app_pages", "app.state"))]
        for f, names in pages.items()
    }
    assert not any(upward.values()), f"{layer} imports a layer above it: {upward}"


def test_the_layer_check_sees_what_it_should():
    """The walk itself: a file that imports streamlit inside a function, or the dashboard by name, is seen."""
    assert "streamlit" in _imports_of(ROOT / "app" / "widgets" / "sidebar.py")
    assert "<constant DASHBOARD_PREPARE>" in _imports_of(ROOT / "panda" / "cli.py")
    assert "app.model.params.Params" in _imports_of(ROOT / "app" / "server" / "prepare.py")


def test_only_state_caches():
    """app/state.py is the only module with st.cache_data / st.cache_resource (as its docstring says)."""
    users = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "app").rglob("*.py")
        if re.search(r"\bst\.cache_(data|resource)\b", p.read_text(encoding="utf-8"))
    )
    assert users == ["app/state.py"], users


def _panda_module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_library_has_no_import_cycle():
    """No module of panda/ imports, even inside a function, one that imports it back (instance <-> priors and
    audit <-> mechanisms were such loops); a package's __init__ re-exporting its modules is not a cycle."""
    modules = {_panda_module(p): p for p in (ROOT / "panda").rglob("*.py")}
    graph = {
        name: {
            target
            for imported in _imports_of(path)
            for target in (imported, imported.rpartition(".")[0])
            if target in modules and target != name and not name.startswith(target + ".")
        }
        for name, path in modules.items()
    }
    graph = {name: {t for t in targets if not (name == t.rpartition(".")[0])} for name, targets in graph.items()}
    for name in graph:  # a package importing its own submodules (re-exports) is no loop
        if modules[name].name == "__init__.py":
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}

    def cycle_from(start: str) -> list[str] | None:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [c for c in (cycle_from(n) for n in sorted(graph)) if c]
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles[:10])
