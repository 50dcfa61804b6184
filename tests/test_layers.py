"""The package's layers, pinned: no lower layer imports a higher one and no module imports itself back.

Layers, from the bottom (docs/architecture.md): the ground (errors, env, logs, the loop, the version, what
differs between gymnasium releases, the compiled hot path),
``aioenv.wire``, ``aioenv.transport``, ``aioenv.core``, the public face (``aioenv.pool`` and ``aioenv.pool_options``,
``aioenv.sync``), ``aioenv.server``, ``aioenv.compat``, ``aioenv.collect`` (collectors over the public face),
``aioenv.ray`` (worker hosts as Ray actors), ``aioenv.openenv`` (OpenEnv's protocol both ways: a server's HTTP port
beside the server, which sees it through its ``Port`` protocol) and ``aioenv.cli``. The worker runtime
(``workers``) stands beside the coordinator and may use the ground, wire and transport only. One edge crosses
from ``core`` to ``workers``, named in :data:`RUNS_HERE`: the launcher may start the worker runtime in the pool's
own process (``executor="in_process"``, ``num_workers=0``), so it imports the two modules that run it there. The
rest of ``core`` sees that worker through a protocol of the launcher's (``HereWorker``), not its module.
Imports are read from the source (every ``import`` statement, also those inside functions or under
``TYPE_CHECKING``), so a lazy import cannot hide a wrong edge.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
GROUND = {
    "aioenv.errors",
    "aioenv.env",
    "aioenv.logs",
    "aioenv._loop",
    "aioenv._version",
    "aioenv._compat",
    "aioenv._hot",
    "aioenv._speedups",
}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for top in ("aioenv", "workers") for p in sorted((ROOT / top).rglob("*.py"))}


def _imports(module: str) -> set[str]:
    """The project modules ``module`` imports (a package's ``__init__`` counts as the package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    return found


def _layer(module: str) -> str:
    if module in GROUND or module == "aioenv.envs" or module.startswith("aioenv.envs."):
        return "ground"
    parts = module.split(".")
    if parts[0] == "workers":
        return "workers"
    if len(parts) == 1:
        return "face"
    if module in HOSTED:
        return "hosted"
    return {"pool": "face", "pool_options": "face", "sync": "face", "vector": "compat"}.get(parts[1], parts[1])


#: The modules of aioenv.openenv that a worker runs (an OpenEnv session as an AsyncEnv): a layer of their own, just
#: above the wire, so that a worker never reaches the rest of aioenv.openenv (the server's HTTP port) through them.
HOSTED = {
    "aioenv.openenv.source",
    "aioenv.openenv.env",
    "aioenv.openenv.spaces",
    "aioenv.openenv.appserver",
    "aioenv.openenv.container",
    "aioenv.openenv.reaper",
}


# What each layer may import, besides itself.
ALLOWED = {
    "ground": {"ground"},
    "wire": {"ground"},
    "transport": {"ground", "wire"},
    "core": {"ground", "wire", "transport"},
    "face": {"ground", "wire", "transport", "core", "compat"},
    "server": {"ground", "wire", "transport", "core"},
    "compat": {"ground", "wire", "transport", "core", "face"},
    "cli": {"ground", "wire", "transport", "core", "face", "server", "compat", "workers", "ray", "openenv"},
    # workers host OpenEnv sessions as any AsyncEnv: the env, its spaces, its app server and its containers (HOSTED),
    # nothing else
    "workers": {"ground", "wire", "transport", "hosted"},
    "hosted": {"ground", "wire", "transport"},
    # collectors (aioenv.collect): batches and episodes from a Pool or SyncPool and a policy
    "collect": {"ground", "wire", "transport", "core", "face"},
    # OpenEnv's protocol both ways (aioenv.openenv): OpenEnv envs in a pool, and a server's HTTP port (a server Port)
    "openenv": {"ground", "wire", "transport", "core", "face", "server", "hosted"},
    # worker hosts placed by Ray (aioenv.ray): runs the worker host (workers.agent) inside Ray actors
    "ray": {"ground", "wire", "transport", "workers"},
}


#: The edges from ``core`` to ``workers``: the launcher runs the worker runtime in the pool's own process.
RUNS_HERE = {("aioenv.core.launcher", "workers.inproc"), ("aioenv.core.launcher", "workers.inproc_concurrent")}


def test_every_module_has_a_known_layer() -> None:
    assert {_layer(m) for m in MODULES} <= set(ALLOWED)
    assert {"aioenv.wire.protocol", "aioenv.transport.pipe", "aioenv.core.scheduler"} <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_higher_layer(module: str) -> None:
    layer = _layer(module)
    wrong = sorted(
        t for t in _imports(module) if _layer(t) not in ALLOWED[layer] | {layer} and (module, t) not in RUNS_HERE
    )
    assert not wrong, f"{module} ({layer}) imports {wrong}; {layer} may import only {sorted(ALLOWED[layer])}"


def test_the_named_edges_from_core_to_workers_are_the_only_ones_and_exist() -> None:
    """Each edge of :data:`RUNS_HERE` is a real import (a stale exception would hide nothing and say something
    false), and no other module of ``core`` imports ``workers``."""
    edges = {(m, t) for m in MODULES if _layer(m) == "core" for t in _imports(m) if _layer(t) == "workers"}
    assert edges == RUNS_HERE


def test_no_import_circles() -> None:
    """Module-to-module edges (the package ``aioenv`` itself aside: every module's parent runs it) form no
    circle."""
    graph = {m: _imports(m) - {"aioenv"} for m in MODULES if m != "aioenv"}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circle = [*path[path.index(module) :], module]
            pytest.fail("import circle: " + " -> ".join(circle))
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def _loaded_by(code: str) -> set[str]:
    """The project modules a fresh interpreter has loaded after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in sys.modules if m.split('.')[0] in ('aioenv', 'workers')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


def test_a_worker_process_loads_no_layer_above_transport() -> None:
    """A worker imports ``aioenv.errors``, which runs ``aioenv/__init__`` first: the package's public names load
    on first use, so a worker's start does not pay for the coordinator, the pool or the vector facade."""
    loaded = _loaded_by("import workers.__main__, workers.runtime, workers.concurrent, workers.hosted")
    above = sorted(m for m in loaded if _layer(m) not in ALLOWED["workers"] | {"workers"} and m != "aioenv")
    assert not above, f"a worker process loads {above}"
    assert {"workers.runtime", "aioenv.errors", "aioenv.wire.protocol"} <= loaded  # the probe sees real imports


def test_public_names_of_the_package_load_on_first_use() -> None:
    assert "aioenv.pool" not in _loaded_by("import aioenv")
    loaded = _loaded_by("import aioenv\nassert aioenv.Pool is __import__('aioenv.pool').pool.Pool")
    assert {"aioenv.pool", "aioenv.core.coordinator"} <= loaded
    import aioenv

    with pytest.raises(AttributeError, match="module 'aioenv' has no attribute 'Poool'"):
        aioenv.Poool  # type: ignore[attr-defined]  # noqa: B018
