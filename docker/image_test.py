"""``make image-test``: build the aioenv image and run it for real, with docker or podman.

What it proves, in order (each step prints one ``ok`` line; the first failure stops the run, says why and
exits 1):

1. **build**: ``docker/Dockerfile`` builds (podman with ``--format docker``: the OCI format has no
   HEALTHCHECK); the image runs as a non-root user, has a health check, no compiler and no build-stage
   sources, its aioenv runs the compiled hot path (built in the build stage wherever the base's Python has its
   headers), and its size is reported (and what aioenv adds to the base image);
2. **run**: ``run -d`` with the port published on loopback and a key directory mounted at ``/keys`` (the
   image serves with ``--auth /keys``; a client holds an admitted key); the time from ``run`` to the server's
   first reply; a remote pool of 8 CartPole envs gives exactly ``gymnasium.vector.SyncVectorEnv``'s
   observations, rewards and flags for the same seeds and actions (autoresets included);
3. **health check**: the image's own HEALTHCHECK command answers inside the container (and podman's
   ``healthcheck run`` says healthy), and fails in a container with no server;
4. **stop**: SIGTERM (``stop``) with a client pool still open: exit code 0, well within the grace period;
5. **compose**: ``docker/compose.yaml`` up (``docker compose`` or ``podman-compose``): every worker-host
   replica joins (``aioenv status`` lists one host per replica container), one pool per replica lands on
   each (its worker processes run in the replica containers, none in the server's), its results equal
   SyncVectorEnv's, closing the pools frees the hosts; ``stop`` (SIGTERM) ends every container with exit
   code 0, ``down`` removes them;
6. nothing this run started is left: no container, pod or network.

Usage: ``make image-test`` or ``.venv/bin/python docker/image_test.py [--engine docker|podman] [--no-build]``.
The engine is docker when ``docker version`` reaches a daemon, else podman (with podman-compose for the compose
part). Needs aioenv and gymnasium installed (the project's .venv).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import aioenv
from aioenv.server.status import fetch_status
from aioenv.transport.auth import create_keys

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
#: A label on every container this run starts itself (compose's are found by their project label).
RUN_LABEL = "org.aioenv.image-test"
#: Upper bound for a command or a wait that should finish promptly: a hang guard, never a speed check.
HANG = 120.0
#: The env the pools run, and how many of them.
ENV_ID = "CartPole-v1"
NUM_ENVS = 8
#: Lock-step steps compared with SyncVectorEnv: CartPole episodes under random actions end after ~20 steps,
#: so this covers many autoresets.
STEPS = 200
#: The image's HEALTHCHECK command is run inside containers with the engine's ``exec``; this bounds it.
HEALTH_TIMEOUT = 30.0


class Failure(Exception):
    """A check that failed; the message says what was expected and what happened."""


def ok(message: str) -> None:
    """Report a check that passed."""
    print(f"ok    {message}", flush=True)


# ---- the engine ----------------------------------------------------------------------------------------------


def answers(argv: Sequence[str]) -> bool:
    """Whether ``argv`` exists and exits with 0 (within 30 s)."""
    if shutil.which(argv[0]) is None:
        return False
    try:
        return subprocess.run(list(argv), capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def docker_is_podman() -> bool:
    """Whether ``docker version`` reaches podman's Docker-compatible API rather than a Docker daemon."""
    if shutil.which("docker") is None:
        return False
    try:
        proc = subprocess.run(["docker", "version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and "Podman Engine" in proc.stdout


def first_line(argv: Sequence[str]) -> str:
    """The first line ``argv`` prints (empty when it fails)."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0].strip() if lines else ""


@dataclass
class Engine:
    """A container engine's command line (``docker`` or ``podman``) and its compose tool."""

    name: str
    compose: list[str]
    log_dir: Path

    @classmethod
    def detect(cls, wanted: str | None, compose: str | None, log_dir: Path) -> Engine:
        """The engine asked for, else docker when ``docker version`` reaches a daemon, else podman; its compose
        tool: ``docker compose`` (or ``docker-compose``) for docker, ``podman-compose`` (or ``podman compose``)
        for podman, unless ``compose`` names one.

        A docker CLI whose daemon is podman's Docker-compatible API (``DOCKER_HOST=.../podman.sock``) counts as
        podman when the podman CLI is there too: that API (podman 4.3) leaves the health check out of
        ``image inspect``, and builds cannot ask it for the docker image format.
        """
        candidates = [wanted] if wanted else ["docker", "podman"]
        if not wanted and docker_is_podman() and answers(["podman", "version"]):
            candidates = ["podman"]
        for name in candidates:
            if answers([name, "version"]):
                break
        else:
            raise Failure(
                f"no container engine answers (`{' version` / `'.join(candidates)} version` fail): start a "
                "Docker daemon, or install podman and podman-compose"
            )
        if compose:
            tool = compose.split()
            if not answers([*tool, "version"]):
                raise Failure(f"`{compose} version` fails")
        else:
            options = (
                [["docker", "compose"], ["docker-compose"]]
                if name == "docker"
                else [["podman-compose"], ["podman", "compose"]]
            )
            found = next((tool for tool in options if answers([*tool, "version"])), None)
            if found is None:
                raise Failure(f"no compose tool answers for {name}: tried {', '.join(' '.join(t) for t in options)}")
            tool = found
        return cls(name, tool, log_dir)

    def describe(self) -> str:
        """The engine's and the compose tool's versions, one line."""
        compose_version = next(
            (
                line
                for line in subprocess.run(
                    [*self.compose, "version"], capture_output=True, text=True, timeout=30, check=False
                ).stdout.splitlines()
                if "version" in line.lower() and "podman version" not in line.lower()
            ),
            "?",
        )
        return f"{first_line([self.name, '--version'])}; {' '.join(self.compose)}: {compose_version.strip()}"

    def __call__(
        self, *args: str, check: bool = True, timeout: float = HANG, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``ENGINE ARGS``; with ``check``, a non-zero exit is a :class:`Failure` showing its output."""
        return self.run([self.name, *args], check=check, timeout=timeout, env=env)

    def run(
        self, argv: list[str], *, check: bool = True, timeout: float = HANG, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` (an engine or compose command line) in the repository root."""
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            raise Failure(f"`{shlex.join(argv)}` did not finish within {timeout:.0f} s") from exc
        if check and proc.returncode != 0:
            raise Failure(f"`{shlex.join(argv)}` exited with {proc.returncode}:\n{tail(proc.stdout + proc.stderr)}")
        return proc

    def inspect(self, kind: str, name: str) -> dict[str, Any]:
        """``ENGINE KIND inspect NAME`` as a dict (``kind``: image or container)."""
        found = json.loads(self(kind, "inspect", name).stdout)
        if not isinstance(found, list) or len(found) != 1 or not isinstance(found[0], dict):
            raise Failure(f"`{self.name} {kind} inspect {name}` gave {found!r}")
        return found[0]

    def containers(self, *filters: str) -> list[str]:
        """Names of the containers (running or not) that match every ``label=...`` / ``name=...`` filter."""
        argv = ["ps", "-a", "--format", "{{.Names}}"]
        for item in filters:
            argv += ["--filter", item]
        return sorted(line for line in self(*argv).stdout.split() if line)


def tail(text: str, lines: int = 40) -> str:
    """The last ``lines`` lines of ``text``, indented."""
    kept = [line for line in text.strip().splitlines() if "systemd" not in line][-lines:]
    return "\n".join(f"    | {line}" for line in kept)


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def megabytes(size: int) -> str:
    """``size`` bytes in MB (10^6, as the engines print image sizes)."""
    return f"{size / 1e6:.1f} MB"


# ---- what the image must be --------------------------------------------------------------------------------


def compose_setting(service: str, *keys: str, default: str | None = None) -> str:
    """A scalar of docker/compose.yaml, ``services.SERVICE.KEYS...``, as written (quotes dropped).

    A small reader for the block style that file uses (PyYAML is a test extra; this script needs only aioenv
    and gymnasium). List items and flow collections are skipped, never read.
    """
    path = ["services", service, *keys]
    stack: list[tuple[int, str]] = []
    for raw in COMPOSE_FILE.read_text().splitlines():
        line = raw.split(" #", 1)[0].rstrip()
        stripped = line.lstrip()
        if not stripped or stripped.startswith(("#", "-")):
            continue
        key, colon, value = stripped.partition(":")
        if not colon:
            continue
        indent = len(line) - len(stripped)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key.strip()))
        if [k for _, k in stack] == path and value.strip():
            return value.strip().strip("\"'")
    if default is None:
        raise Failure(f"{COMPOSE_FILE} sets no {'.'.join(path)}")
    return default


def final_base() -> str:
    """The base image of the Dockerfile's last stage (its last ``FROM``)."""
    bases = [line.split()[1] for line in DOCKERFILE.read_text().splitlines() if line.upper().startswith("FROM ")]
    if not bases:
        raise Failure(f"no FROM in {DOCKERFILE}")
    return bases[-1]


@dataclass
class ImageFacts:
    """What the image test learned about the image, for the summary."""

    name: str
    size: int = 0
    base: str = ""
    base_size: int | None = None
    user: str = ""
    health: list[str] = field(default_factory=list)
    build_seconds: float | None = None

    def describe_size(self) -> str:
        """The image's size, and what aioenv adds to the base image when the base's size is known."""
        if self.base_size is None:
            return megabytes(self.size)
        added = megabytes(self.size - self.base_size)
        return f"{megabytes(self.size)} = base {self.base} {megabytes(self.base_size)} + aioenv {added}"


def build(engine: Engine, image: str) -> float:
    """Build docker/Dockerfile as ``image`` (podman: in docker format, which keeps HEALTHCHECK); seconds taken."""
    argv = ["build", "-f", str(DOCKERFILE.relative_to(ROOT)), "-t", image]
    if engine.name == "podman":
        argv += ["--format", "docker"]
    log = engine.log_dir / "build.log"
    start = time.monotonic()
    proc = engine(*argv, ".", check=False, timeout=1800)
    took = time.monotonic() - start
    log.write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise Failure(
            f"`{engine.name} {' '.join(argv)} .` failed ({proc.returncode}); log {log}:\n{tail(log.read_text())}"
        )
    return took


def check_image(engine: Engine, facts: ImageFacts) -> None:
    """Non-root user, a health check, the server as entrypoint, no compiler, no build-stage sources, aioenv's compiled
    hot path built; its size."""
    info = engine.inspect("image", facts.name)
    config = info.get("Config") or {}
    facts.size = int(info["Size"])
    facts.user = str(config.get("User") or "")
    if facts.user.split(":")[0] in ("", "root", "0"):
        raise Failure(f"the image runs as root (User {facts.user!r})")
    # docker keeps the health check in the image's Config, podman's inspect beside it
    healthcheck = config.get("Healthcheck") or info.get("Healthcheck") or {}
    health = healthcheck.get("Test") or []
    if not health or health[0] not in ("CMD", "CMD-SHELL"):
        why = (
            "the docker CLI talks to podman here, whose Docker API leaves health checks out of `image inspect`: "
            "use --engine podman"
            if engine.name == "docker" and docker_is_podman()
            else "was it built in OCI format? (podman build needs --format docker)"
        )
        raise Failure(f"the image has no HEALTHCHECK (Healthcheck {healthcheck!r}): {why}")
    facts.health = list(health[1:]) if health[0] == "CMD" else ["sh", "-c", health[1]]
    if config.get("Entrypoint") != ["aioenv", "serve"]:
        raise Failure(f"the image's entrypoint is {config.get('Entrypoint')!r}, not aioenv serve")
    facts.base = final_base()
    with contextlib.suppress(Failure, KeyError, ValueError):
        facts.base_size = int(engine.inspect("image", facts.base)["Size"])
    probe = (
        'for c in gcc cc c++ g++ clang tcc ld as make; do command -v "$c" && echo "compiler: $c"; done; '
        'for d in /src /root/.cache/pip; do test -e "$d" && echo "left over: $d"; done; '
        'echo "uid=$(id -u)"; '
        "python -c 'import os, sysconfig; from aioenv import _hot; "
        'print("compiled:", _hot.compiled is not None, "headers:", '
        'os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))\''
    )
    out = engine("run", "--rm", "--label", RUN_LABEL, "--entrypoint", "sh", facts.name, "-c", probe).stdout
    if "compiler:" in out or "left over:" in out:
        raise Failure(f"the runtime image holds what only the build stage should:\n{tail(out)}")
    # The build stage's gcc builds aioenv/_speedups.c wherever the base's Python has its headers (the official
    # python images do; a base without them installs aioenv on its pure-Python twins, as pip does anywhere).
    if "compiled: True" not in out and "headers: False" not in out:
        raise Failure(f"the image's aioenv runs without its compiled hot path:\n{tail(out)}")
    hot = "the compiled hot path" if "compiled: True" in out else "the pure-Python twins (no Python headers)"
    if f"uid={facts.user.split(':')[0]}" not in out:
        raise Failure(f"a container of the image does not run as uid {facts.user}: {out.strip()}")
    ok(
        f"image {facts.name}: {facts.describe_size()}; user {facts.user}, no compiler, no build sources, "
        f"{hot}, HEALTHCHECK present"
    )


# ---- a remote pool against SyncVectorEnv -------------------------------------------------------------------


async def first_reply(
    endpoint: str, alive: Callable[[], None], deadline: float, keys: tuple[str, str] | None = None
) -> float:
    """Ask ``endpoint`` for its status (with ``keys``: a client's CURVE keys) until it answers; the monotonic time
    of the answer. ``alive()`` raises when the container already exited."""
    while True:
        try:
            await fetch_status(endpoint, timeout=0.5, curve_keys=keys)
            return time.monotonic()
        except (TimeoutError, OSError):
            pass
        alive()
        if time.monotonic() > deadline:
            raise Failure(f"{endpoint} did not answer within {HANG:.0f} s")


async def compare_with_sync_vector_env(pool: aioenv.Pool, seed: int) -> int:
    """Step ``pool`` (seeded ``seed``, fresh) and a SyncVectorEnv with the same seeds and random actions in
    lock-step; raise :class:`Failure` at the first difference. Episodes ended along the way."""
    n = pool.num_envs
    ref = gym.vector.SyncVectorEnv([lambda: gym.make(ENV_ID) for _ in range(n)])
    try:
        actions = np.random.default_rng(seed).integers(0, 2, size=(STEPS, n), dtype=np.int64)
        got_obs, _ = await pool.reset()
        want_obs, _ = ref.reset(seed=seed)
        if not np.array_equal(got_obs, want_obs):
            raise Failure(f"reset(seed={seed}): the pool's observations differ from SyncVectorEnv's")
        ended = 0
        for t in range(STEPS):
            got = await pool.step(actions[t])
            want = ref.step(actions[t])
            for what, a, b in zip(("obs", "reward", "terminated", "truncated"), got[:4], want[:4], strict=True):
                if not np.array_equal(np.asarray(a), np.asarray(b)):
                    raise Failure(f"step {t} (seed {seed}): {what} differs from SyncVectorEnv's:\n{a}\n{b}")
            ended += int(np.sum(np.asarray(want[2]) | np.asarray(want[3])))
        return ended
    finally:
        ref.close()


async def matches_sync(pool: aioenv.Pool, seed: int, where: str) -> None:
    """:func:`compare_with_sync_vector_env`, reported."""
    ended = await compare_with_sync_vector_env(pool, seed)
    if not ended:
        raise Failure(f"no episode ended in {STEPS} steps: the comparison did not cover autoreset")
    ok(f"{where}: {STEPS} steps x {pool.num_envs} envs equal SyncVectorEnv's (seed {seed}, {ended} episodes ended)")


# ---- the image, run alone ------------------------------------------------------------------------------------


def container_alive(engine: Engine, name: str) -> Callable[[], None]:
    """A check that raises :class:`Failure` (with the container's log) once ``name`` is no longer running."""

    def check() -> None:
        state = engine.inspect("container", name).get("State") or {}
        if not state.get("Running"):
            logs = engine("logs", name, check=False)
            raise Failure(f"container {name} exited ({state.get('ExitCode')}):\n{tail(logs.stdout + logs.stderr)}")

    return check


def exec_health(engine: Engine, container: str, health: list[str]) -> subprocess.CompletedProcess[str]:
    """The image's HEALTHCHECK command, run inside ``container``."""
    return engine("exec", container, *health, check=False, timeout=HEALTH_TIMEOUT)


def stop_container(engine: Engine, name: str, grace: int) -> tuple[int, float]:
    """``stop`` (SIGTERM, then SIGKILL after ``grace`` seconds): the exit code and the seconds it took."""
    start = time.monotonic()
    engine("stop", "-t", str(grace), name, timeout=grace + HANG)
    took = time.monotonic() - start
    state = engine.inspect("container", name).get("State") or {}
    return int(state.get("ExitCode", -1)), took


def image_keys(directory: Path) -> tuple[str, tuple[str, str]]:
    """A key directory for the image's ``--auth /keys`` (the server's, the health check's and a client's key pairs,
    readable by the image's user: throwaway keys of this run) as ``run`` mounts it, and the client's keys."""
    for key in ("server", "health", "client"):
        create_keys(directory, key)
    directory.chmod(0o755)
    for path in directory.iterdir():
        path.chmod(0o644)
    return f"{directory}:/keys:ro", (str(directory / "client.key_secret"), str(directory / "server.key"))


async def run_alone(engine: Engine, facts: ImageFacts, run_id: str, keys_dir: Path) -> dict[str, float]:
    """Run the image alone: first reply, a remote pool equal to SyncVectorEnv, the health check, SIGTERM."""
    name = f"aioenv-image-test-{run_id}"
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    mount, keys = image_keys(keys_dir)
    timings: dict[str, float] = {}
    pool: aioenv.Pool | None = None
    start = time.monotonic()
    try:
        engine(
            "run", "-d", "--name", name, "--label", RUN_LABEL, "--init", "-p", f"127.0.0.1:{port}:5555", "-v", mount,
            facts.name,
        )  # fmt: skip
        replied = await first_reply(endpoint, container_alive(engine, name), start + HANG, keys)
        timings["first reply"] = replied - start
        ok(f"run -> first reply from the server: {timings['first reply']:.2f} s ({endpoint})")

        async with asyncio.timeout(HANG):
            pool = await aioenv.make(ENV_ID, NUM_ENVS, endpoint=endpoint, seed=1234, curve_keys=keys)
            timings["first pool"] = time.monotonic() - start
            await matches_sync(pool, 1234, f"run: remote pool of {NUM_ENVS} {ENV_ID}")
            await pool.aclose()
            pool = None

        proc = await asyncio.to_thread(exec_health, engine, name, facts.health)
        if proc.returncode != 0:
            raise Failure(
                f"the health check `{' '.join(facts.health)}` fails inside {name} ({proc.returncode}):\n"
                f"{tail(proc.stdout + proc.stderr)}"
            )
        verdict = "exits 0 inside the container"
        if engine.name == "podman":
            proc = engine("healthcheck", "run", name, check=False, timeout=HEALTH_TIMEOUT)
            if proc.returncode != 0:
                raise Failure(f"`podman healthcheck run {name}`: {proc.returncode}\n{tail(proc.stdout + proc.stderr)}")
            verdict += "; `podman healthcheck run` says healthy"
        # ... and it is no formality: with no server to ask it fails (it waits its --timeout, 3 s).
        lone = engine(
            "run",
            "--rm",
            "--label",
            RUN_LABEL,
            "-v",
            mount,
            "--entrypoint",
            facts.health[0],
            facts.name,
            *facts.health[1:],
            check=False,
        )
        if lone.returncode == 0:
            raise Failure(f"the health check `{' '.join(facts.health)}` passes in a container with no server")
        ok(f"health check `{' '.join(facts.health)}`: {verdict}; exits {lone.returncode} without a server")

        # SIGTERM with a client's pool still open, as `docker stop` comes in production.
        pool = await aioenv.make(ENV_ID, 2, endpoint=endpoint, seed=0, curve_keys=keys)
        await pool.reset()
        code, took = await asyncio.to_thread(stop_container, engine, name, 30)
        logs = engine("logs", name, check=False)
        if code != 0:
            raise Failure(
                f"{name} exited with {code} after SIGTERM (137: killed at the end of the grace period):\n"
                f"{tail(logs.stdout + logs.stderr)}"
            )
        if "aioenv server stopped" not in logs.stdout + logs.stderr:
            raise Failure(f"{name} did not log its clean stop:\n{tail(logs.stdout + logs.stderr)}")
        async with asyncio.timeout(HANG):  # the client's close must not hang on a server that is gone
            await pool.aclose()
        pool = None
        ok(f"stop (SIGTERM) with a pool open: exit code 0 in {took:.2f} s (grace period 30 s)")
        engine("rm", name)
    finally:
        if pool is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(15):
                    await pool.aclose()
        engine("rm", "-f", name, check=False)
    return timings


# ---- docker/compose.yaml -------------------------------------------------------------------------------------

#: Lists the worker processes (``python -m workers ...``) running in a container, by their command lines.
# A worker forked from a host's template (AIOENV_WORKER_START=fork, the default) shows its command line as one
# title, its words apart by spaces, not by NULs (setproctitle); the template itself runs ``-m workers.zygote``.
LIST_WORKERS = (
    "import os\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try:\n"
    "        cmd = b' '.join(open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')) + b' '\n"
    "    except OSError:\n"
    "        continue\n"
    "    if b' -m workers ' in cmd and int(pid) != os.getpid():  # (this script's own text names it)\n"
    "        print(pid)\n"
)


@dataclass
class Compose:
    """docker/compose.yaml under a project name of this run's own, its client port on a free loopback port."""

    engine: Engine
    project: str
    port: int = field(default_factory=free_port)

    @property
    def env(self) -> dict[str, str]:
        """The environment compose runs with: ``AIOENV_PORT`` picks the published client port."""
        return {**os.environ, "AIOENV_PORT": str(self.port)}

    def __call__(self, *args: str, check: bool = True, timeout: float = HANG) -> subprocess.CompletedProcess[str]:
        """``COMPOSE -f docker/compose.yaml -p PROJECT ARGS``."""
        argv = [*self.engine.compose, "-f", str(COMPOSE_FILE.relative_to(ROOT)), "-p", self.project, *args]
        return self.engine.run(argv, check=check, timeout=timeout, env=self.env)

    def containers(self, service: str | None = None) -> list[str]:
        """The project's containers (of one service), running or not."""
        filters = [f"label=com.docker.compose.project={self.project}"]
        if service:
            filters.append(f"label=com.docker.compose.service={service}")
        return self.engine.containers(*filters)

    def workers_in(self, container: str) -> list[str]:
        """Pids of the aioenv worker processes running in ``container``."""
        return self.engine("exec", container, "python", "-c", LIST_WORKERS).stdout.split()

    def leftovers(self) -> list[str]:
        """Containers, pods and networks of the project that still exist."""
        left = [f"container {name}" for name in self.containers()]
        networks = self.engine("network", "ls", "--format", "{{.Name}}").stdout.split()
        left += [f"network {net}" for net in networks if net.startswith(self.project)]
        if self.engine.name == "podman":
            pods = self.engine("pod", "ls", "--format", "{{.Name}}").stdout.split()
            left += [f"pod {pod}" for pod in pods if self.project in pod]
        return left


async def wait_for(what: str, probe: Callable[[], Any], timeout: float = HANG) -> Any:
    """Call the coroutine function ``probe`` every 0.2 s until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.2)
    raise Failure(f"{what}: not within {timeout:.0f} s (last seen: {last!r})")


def grace_seconds(service: str) -> int:
    """A compose service's ``stop_grace_period`` (such as ``30s``) in seconds (compose's default: 10)."""
    period = compose_setting(service, "stop_grace_period", default="10s")
    found = re.fullmatch(r"(\d+)s", period)
    if found is None:
        raise Failure(f"{service}'s stop_grace_period {period!r} is not in seconds (such as 30s)")
    return int(found[1])


def remote_hosts(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The worker hosts of a status answer (the server's own ``local`` host left out)."""
    return [h for h in state.get("hosts", []) if h.get("name") != "local"]


async def run_compose(engine: Engine, facts: ImageFacts, run_id: str) -> None:
    """docker/compose.yaml: replicas join, pools land on them, SIGTERM stops all, down removes all."""
    images = {service: compose_setting(service, "image") for service in ("server", "worker")}
    if set(images.values()) != {facts.name}:
        raise Failure(f"compose.yaml's images are {images}, not {facts.name}")
    replicas = int(compose_setting("worker", "deploy", "replicas", default="1"))
    grace = max(grace_seconds("server"), grace_seconds("worker"))
    compose = Compose(engine, f"aioenvtest{run_id}")
    endpoint = f"tcp://127.0.0.1:{compose.port}"
    pools: list[aioenv.Pool] = []
    try:
        compose("up", "-d")  # the image built above: compose.yaml names it
        servers, workers = compose.containers("server"), compose.containers("worker")
        if len(servers) != 1 or len(workers) != replicas:
            raise Failure(
                f"compose up made servers {servers} and workers {workers}; compose.yaml asks 1 and {replicas}"
            )
        await first_reply(endpoint, container_alive(engine, servers[0]), time.monotonic() + HANG)

        async def joined() -> list[dict[str, Any]] | None:
            hosts = remote_hosts(await fetch_status(endpoint))
            return hosts if len(hosts) >= replicas else None

        hosts = await wait_for(f"{replicas} worker hosts joining {endpoint}", joined)
        # each replica's container is a host: a host's address is its container's hostname (its short id)
        ids = {engine("inspect", "--format", "{{.Config.Hostname}}", w).stdout.strip(): w for w in workers}
        unknown = [h["name"] for h in hosts if h["host"] not in ids]
        if len(hosts) != replicas or unknown:
            raise Failure(f"worker hosts {hosts} are not the {replicas} replica containers {ids}")
        joined_as = ", ".join(f"{h['name']} ({ids[h['host']]})" for h in hosts)
        ok(f"compose up: {replicas} worker-host replicas joined: {joined_as}")

        # one pool per replica, one worker process each: the least-loaded placement puts one on every host
        for k in range(replicas):  # one at a time, each kept at once: the finally closes what opened
            pools.append(await aioenv.make(ENV_ID, NUM_ENVS, endpoint=endpoint, seed=100 * k, num_workers=1))  # noqa: PERF401
        state = await fetch_status(endpoint)
        placed = {h["name"]: h["envs"] for h in state["hosts"]}
        if placed.get("local", 0) or any(h["envs"] != NUM_ENVS for h in remote_hosts(state)):
            raise Failure(f"{replicas} pools of {NUM_ENVS} envs are not one per replica: envs per host {placed}")
        running = {w: compose.workers_in(w) for w in workers}
        on_server = compose.workers_in(servers[0])
        if not all(running.values()) or on_server:
            raise Failure(f"worker processes by container: {running}, on the server: {on_server}")
        ok(
            f"{replicas} pools placed one per replica (envs per host {placed}); worker processes run in "
            f"{', '.join(f'{w} ({len(p)})' for w, p in running.items())}, none in {servers[0]}"
        )
        for k, pool in enumerate(pools):
            await matches_sync(pool, 100 * k, f"compose: pool {k} on a worker host")
        while pools:
            await pools.pop().aclose()

        async def freed() -> bool:
            hosts = remote_hosts(await fetch_status(endpoint))
            return all(h["envs"] == 0 and not h["processes"] for h in hosts) and not any(
                compose.workers_in(w) for w in workers
            )

        await wait_for("the replicas' worker processes ending once the pools closed", freed)
        ok("pools closed: every replica's worker processes ended, hosts hold 0 envs")

        start = time.monotonic()
        compose("stop", "-t", str(grace), timeout=grace + HANG)
        took = time.monotonic() - start
        codes = {name: (engine.inspect("container", name).get("State") or {}) for name in compose.containers()}
        bad = {
            name: (s.get("Status"), s.get("ExitCode"))
            for name, s in codes.items()
            if s.get("ExitCode") != 0 or s.get("Running")
        }
        if bad:
            logs = "\n".join(f"{n}:\n{tail(engine('logs', n, check=False).stderr, 10)}" for n in bad)
            raise Failure(f"compose stop (SIGTERM) left containers not exited with 0: {bad}\n{logs}")
        ok(f"compose stop (SIGTERM): {len(codes)} containers exited with code 0 in {took:.2f} s (grace {grace} s)")
        compose("down", timeout=grace + HANG)
        left = compose.leftovers()
        if left:
            raise Failure(f"compose down left {left}")
        ok(f"compose down: no container, pod or network of project {compose.project} left")
    finally:
        for pool in pools:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(15):
                    await pool.aclose()
        if compose.leftovers():
            compose("down", "-t", "5", check=False)


# ---- the whole run ---------------------------------------------------------------------------------------------


async def main_async(engine: Engine, facts: ImageFacts, run_id: str) -> dict[str, float]:
    """Everything after the build."""
    with tempfile.TemporaryDirectory(prefix="aioenv-image-keys-") as keys:
        timings = await run_alone(engine, facts, run_id, Path(keys) / "keys")
    await run_compose(engine, facts, run_id)
    left = engine.containers(f"label={RUN_LABEL}")
    if left:
        raise Failure(f"containers left behind: {left}")
    return timings


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--engine", default=None, help="docker or podman (default: docker if it answers, else podman)")
    parser.add_argument(
        "--compose", default=None, help="the compose command (default: docker compose / podman-compose)"
    )
    parser.add_argument("--no-build", action="store_true", help="test the image already built")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every check; 0 when all pass, 1 (with the reason) at the first failure."""
    args = parse_args(argv)
    run_id = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory(prefix="aioenv-image-test-") as tmp:
        try:
            engine = Engine.detect(args.engine or None, args.compose, Path(tmp))
            print(f"image-test {run_id}: {engine.describe()}", flush=True)
            facts = ImageFacts(compose_setting("server", "image"))
            if not args.no_build:
                facts.build_seconds = build(engine, facts.name)
                ok(f"build {facts.name} from docker/Dockerfile: {facts.build_seconds:.1f} s")
            check_image(engine, facts)
            timings = asyncio.run(main_async(engine, facts, run_id))
        except Failure as exc:
            print(f"FAIL  {exc}", file=sys.stderr, flush=True)
            return 1
        except Exception as exc:  # noqa: BLE001 - anything else is a failure too, said as such, with its traceback
            traceback.print_exc()
            print(f"FAIL  unexpected {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
    print(f"\nimage-test passed ({engine.name}, {' '.join(engine.compose)})")
    print(f"  image size:              {facts.describe_size()}")
    if facts.build_seconds is not None:
        print(f"  build:                   {facts.build_seconds:.1f} s")
    print(f"  run -> first reply:      {timings['first reply']:.2f} s (aioenv status answered)")
    print(f"  run -> remote pool open: {timings['first pool']:.2f} s (aioenv.make of {NUM_ENVS} {ENV_ID} returned)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
