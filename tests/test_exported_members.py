"""The public surface, pinned: what ``aioenv`` and its public modules export, and that each export is
documented. A name added to or dropped from a public ``__all__`` must be added to or dropped from here."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import re
import types

import pytest

ERRORS = (
    "AioEnvError CapacityError ConnectionLost EnvError EnvRemade EpisodeEnded InvalidAction PoolClosed ProtocolError "
    "StepTimeout UsageError WorkerCrashed"
)

# One line per public module: the names its __all__ must list, no more, no fewer.
PUBLIC = {
    "aioenv": f"{ERRORS} PROTOCOL_VERSION AsyncEnv Pool ResetResult StepResult SyncPool __version__ make "
    "make_sync run vector",
    "aioenv.errors": ERRORS,
    "aioenv.vector": "AioVectorEnv",
    "aioenv.compat.envpool": "DMEnvPool EnvPool EnvSpec GymnasiumEnvPool list_all_envs make make_dm make_gym "
    "make_gymnasium make_spec",
    "aioenv.compat.sb3": "AioVecEnv",
    "aioenv.compat.torchrl": "AioEnv",
    "aioenv.collect": "Batch Collector Episode EpisodeCollector Turn",
    "aioenv.ray": "HostInfo RayHosts STRATEGIES place_hosts place_hosts_async reachable_endpoint",
    "aioenv.server.server": "Server ServerConfig",  # a server in one's own process (docs/ray.md)
    "aioenv.server.status": "fetch_status",  # what `aioenv status` asks, from code (examples/)
}

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: ``import aioenv.x`` / ``from aioenv.x import y`` in the docs' code and the examples.
_IMPORT = re.compile(r"^\s*(?:from\s+(aioenv(?:\.\w+)*)\s+import\s+([\w, ]+)|import\s+(aioenv(?:\.\w+)*))", re.M)


def _documented_modules() -> set[str]:
    """The aioenv modules the README, docs/ and examples/ import from (a name imported from a package that is
    itself a module counts as that module)."""
    found: set[str] = set()
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
    for path in texts:
        for source, names, plain in _IMPORT.findall(path.read_text()):
            if plain:
                found.add(plain)
                continue
            found.add(source)
            for name in (n.strip() for n in names.split(",")):
                if isinstance(getattr(importlib.import_module(source), name, None), types.ModuleType):
                    found.add(f"{source}.{name}")
    return found


def test_every_module_the_docs_import_from_is_pinned() -> None:
    documented = _documented_modules()
    assert {"aioenv", "aioenv.collect", "aioenv.compat.envpool"} <= documented  # the scan sees real imports
    packages_of_modules = {"aioenv.compat"}  # holds pinned modules, exports nothing of its own
    assert documented - packages_of_modules <= set(PUBLIC), sorted(documented - packages_of_modules - set(PUBLIC))


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_exactly_the_public_surface(name: str) -> None:
    module = importlib.import_module(name)
    assert set(module.__all__) == set(PUBLIC[name].split())
    assert len(module.__all__) == len(set(module.__all__)), "a name is exported twice"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_export_exists_is_documented_and_public(name: str) -> None:
    module = importlib.import_module(name)
    assert inspect.getdoc(module), f"{name} has no docstring"
    for member in module.__all__:
        assert not member.startswith("_") or member == "__version__", f"{name} exports private {member}"
        value = getattr(module, member)  # AttributeError: exported but missing
        if isinstance(value, types.ModuleType | type) or callable(value):
            assert inspect.getdoc(value), f"{name}.{member} has no docstring"


def test_public_names_not_in_all_are_modules_only() -> None:
    """Whatever else ``import aioenv`` shows without an underscore is a subpackage, not an API."""
    import aioenv

    extra = {n for n in dir(aioenv) if not n.startswith("_") and n not in aioenv.__all__}
    assert all(isinstance(getattr(aioenv, n), types.ModuleType) for n in extra), sorted(extra)


def test_documented_public_imports_keep_working() -> None:
    from aioenv import AsyncEnv, Pool, SyncPool, make, run
    from aioenv.compat.envpool import make as envpool_make
    from aioenv.compat.sb3 import AioVecEnv
    from aioenv.compat.vector import AioVectorEnv as Moved
    from aioenv.vector import AioVectorEnv

    assert AioVectorEnv is Moved
    assert all(callable(x) for x in (AsyncEnv, Pool, SyncPool, make, run, envpool_make, AioVecEnv))
