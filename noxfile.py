"""The version matrix (``make test-matrix``): the suites against the oldest and newest release of each dependency
that pyproject.toml admits, each cell in a virtualenv of its own (``.nox/<cell>``, reused by ``nox -r``).

``nox -l`` lists the cells; ``nox -s <cell>`` runs one; ``nox -s <cell> -- tests/wire`` runs one on other test
paths. :data:`LOWEST` and :data:`NEWEST` are read by tests/test_versions.py, which checks that every lower bound in
pyproject.toml is one that :data:`LOWEST` installs (so the two cannot drift apart). docs/versions.md has the
results. torch, where a cell needs it (stable-baselines3, TorchRL), is the CPU build ``make test`` installs, first:
any other torch request may pull a multi-GB CUDA build.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

#: The oldest release of each dependency that pyproject.toml admits (its lower bound).
LOWEST = {
    "gymnasium": "1.0.0",
    "numpy": "1.26.0",
    "pyzmq": "25.0.0",
    "msgpack": "1.0.0",
    "cloudpickle": "3.0.0",
    "uvloop": "0.19.0",
    "click": "8.1.0",
    "rich": "13.0.0",
    "prometheus-client": "0.17.0",
    "setproctitle": "1.3.0",
    "stable-baselines3": "2.4.0",
    "torchrl": "0.14.1",
    "tensordict": "0.14.3",
    "ray": "2.40.0",
}

#: The newest release of each that pyproject.toml admits, when the matrix last ran (docs/versions.md).
NEWEST = {
    "gymnasium": "1.4.0",
    "numpy": "2.4.6",
    "pyzmq": "27.3.0",
    "msgpack": "1.2.4",
    "cloudpickle": "3.1.3",
    "stable-baselines3": "2.9.2",
    "torchrl": "0.14.1",
    "tensordict": "0.14.3",
    "ray": "2.60.0",
}

#: The oldest build requirement pyproject.toml's [build-system] admits: setuptools 77.0.1 (77.0.0 was yanked) is the
#: first to take ``license`` as an SPDX expression (PEP 639; 74.1 refuses it). It builds setup.py's extension, the
#: compiled hot path (aioenv/_speedups.c).
BUILD_LOWEST = {"setuptools": "77.0.1"}

#: What the suites need besides aioenv (pyproject's test extra, less the peers a cell installs itself).
TEST_DEPS = [
    "pytest>=8",
    "pytest-asyncio>=0.23",
    "pytest-timeout>=2.3",
    "hypothesis>=6.100",
    "psutil>=5.9",
    "aiohttp>=3.9",  # the examples the e2e tests run (examples/web_env.py)
]

#: The CPU build of torch (on local disk; ``make test`` installs the same).
TORCH = "torch==2.13.0"

#: The suites each cell runs, unless ``-- PATHS`` names others.
CORE = ["tests/test_layers.py", "tests/core", "tests/wire", "tests/transport"]
E2E = ["tests/e2e", "--ignore-glob=tests/e2e/test_bench_*.py", "--ignore=tests/e2e/test_docker.py"]
COMPAT = ["tests/compat/test_vector.py", "tests/compat/test_vector_peer.py"]


def pins(versions: dict[str, str], *names: str) -> list[str]:
    """``name==version`` for each of ``names``."""
    return [f"{name}=={versions[name]}" for name in names]


def run_suites(session: nox.Session, *paths: str) -> None:
    """pytest on ``paths`` (or the paths given after ``--``): one process, stop at the first failure."""
    session.run("python", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *(session.posargs or paths))


def install(session: nox.Session, *requirements: str, torch: bool = False) -> None:
    """aioenv (editable) with ``requirements`` and the test dependencies, in one resolve; torch first."""
    if torch:
        session.install(TORCH)
    session.install("-e", ".", *TEST_DEPS, *requirements)


CORE_DEPS = ("gymnasium", "numpy", "pyzmq", "msgpack", "cloudpickle")
FLOOR = ("uvloop", "click", "rich", "prometheus-client", "setproctitle")


@nox.session(name="oldest")
def oldest(session: nox.Session) -> None:
    """Every core dependency at its lower bound: gymnasium 1.0, numpy 1.26, pyzmq 25, msgpack 1.0,
    cloudpickle 3.0 (and uvloop, click, rich, prometheus-client, setproctitle at theirs)."""
    install(session, *pins(LOWEST, *CORE_DEPS, *FLOOR))
    run_suites(session, *CORE, *E2E, *COMPAT)


@nox.session(name="oldest-quick")
def oldest_quick(session: nox.Session) -> None:
    """The cell CI runs beside ``make test`` (.ci/run): the oldest gymnasium and numpy, with the core tests and the
    e2e tests that start real pools of each kind, in a few minutes on 2 cores."""
    install(session, *pins(LOWEST, *CORE_DEPS))
    run_suites(
        session,
        "tests/test_layers.py",
        "tests/wire",
        "tests/core",
        "tests/e2e/test_gymnasium_releases.py",
        "tests/e2e/test_in_process.py",
        "tests/e2e/test_failures.py",
        "tests/e2e/test_pool_lifecycle.py",
    )


@nox.session(name="build-oldest")
def build_oldest(session: nox.Session) -> None:
    """aioenv built with the oldest setuptools its [build-system] admits (no build isolation): the compiled hot path
    builds and matches its pure-Python twins, and a pool of real workers steps on it."""
    session.install(*pins(BUILD_LOWEST, "setuptools"), *TEST_DEPS)
    session.install("--no-build-isolation", "-e", ".")
    run_suites(session, "tests/core/test_speedups.py", "tests/wire/test_lane.py")


@nox.session(name="gymnasium")
@nox.parametrize("gymnasium", ["1.0.0", "1.2.2", NEWEST["gymnasium"]])
def gymnasium(session: nox.Session, gymnasium: str) -> None:
    """Each gymnasium aioenv has a layer for (1.0: no AutoresetMode, no Discrete dtype; 1.2: no Dict sort_keys)
    and the newest, with the other dependencies at their newest."""
    install(session, f"gymnasium=={gymnasium}", *pins(NEWEST, "numpy", "pyzmq", "msgpack", "cloudpickle"))
    run_suites(session, *CORE, *E2E, *COMPAT)


@nox.session(name="numpy")
@nox.parametrize("numpy", [LOWEST["numpy"], NEWEST["numpy"]])
def numpy(session: nox.Session, numpy: str) -> None:
    """The oldest numpy (1.26) and the newest 2.x, with the newest gymnasium."""
    install(session, f"numpy=={numpy}", *pins(NEWEST, "gymnasium"))
    run_suites(session, *CORE, *E2E, *COMPAT)


@nox.session(name="sb3")
@nox.parametrize("sb3", [LOWEST["stable-baselines3"], NEWEST["stable-baselines3"]])
def sb3(session: nox.Session, sb3: str) -> None:
    """aioenv.compat.sb3 under the oldest and newest stable-baselines3 (2.4 takes gymnasium 1.0 and numpy 1.x only)."""
    older = sb3 == LOWEST["stable-baselines3"]
    versions = LOWEST if older else NEWEST
    install(session, f"stable-baselines3=={sb3}", *pins(versions, "gymnasium", "numpy"), torch=True)
    run_suites(session, "tests/compat/test_sb3.py")


@nox.session(name="torchrl")
def torchrl(session: nox.Session) -> None:
    """aioenv.compat.torchrl under the one torchrl and tensordict release each that pyproject admits."""
    install(session, *pins(LOWEST, "torchrl", "tensordict"), *pins(NEWEST, "gymnasium"), torch=True)
    run_suites(session, "tests/compat/test_torchrl.py")


@nox.session(name="ray")
@nox.parametrize("ray", [LOWEST["ray"], NEWEST["ray"]])
def ray(session: nox.Session, ray: str) -> None:
    """aioenv.ray (worker hosts as Ray actors) under the oldest and newest Ray."""
    install(session, f"ray=={ray}", *pins(NEWEST, "gymnasium"))
    # Ray 2.40's own node start leaves its log files and a subprocess handle open (ResourceWarning, which the
    # suite's filterwarnings makes an error); later releases close them. Only in this cell, only those warnings.
    leaks = ["-W", "ignore::ResourceWarning", "-W", "ignore::pytest.PytestUnraisableExceptionWarning"]
    run_suites(session, *(leaks if ray == LOWEST["ray"] else []), "tests/ray")
