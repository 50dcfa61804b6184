"""What a client may make on an ``aioenv serve`` that allows env names, tried as a hostile client tries it.

One server allows a module's factories (``tests.envs.escapes:*``, with any env_kwargs), two literal dotted
paths, and some gymnasium ids with named env_kwargs. Each escape asks for something the module holds but does
not define as a factory (an imported module or function, a ``functools.partial``, a private or dunder name, a
path through attributes) with env_kwargs that would make the payload write a marker file: the client must get
a ``UsageError`` and the marker must not exist. The legitimate names beside them keep working.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import aioenv
from aioenv.errors import UsageError
from tests.support.procs import HANG
from tests.support.scripts import ROOT
from tests.support.servers import ServerProcess

MOD = "tests.envs.escapes"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    srv = ServerProcess(
        "--workers", "1",
        "--allow-env", f"{MOD}:*",
        "--allow-env", f"{MOD}:Holder.make",  # a dotted path spelled out: allowed, since it is defined here
        "--allow-env", f"{MOD}:Holder.tool.system",  # spelled out too, but it leads out of the module
        "--allow-env", "tests.envs.hosts_only:*",  # a module only the workers can import: they check it
        "--allow-env", "tests.envs.broken_import:*",  # its import raises RuntimeError
        "--allow-env", "CartPole-*",
        "--allow-env", "Acrobot-v1",
        "--allow-env", "Ant-v5",  # its xml_file would tell whether a path exists on the server
        "--allow-env", "*Pendulum-v1",  # meant for gymnasium ids: its '*' never reaches into 'module:' names
        "--allow-env-kwargs", f"{MOD}:*=*",
        "--allow-env-kwargs", f"{MOD}:Holder.*=*",  # kwargs rules match as env patterns do: '*' stops at '.'
        "--allow-env-kwargs", f"{MOD}:Holder.tool.system=*",
        "--allow-env-kwargs", "tests.envs.hosts_only:*=*",
        "--allow-env-kwargs", "CartPole-*=sutton_barto_reward,max_episode_steps",
        "--allow-env-kwargs", "Pendulum-v1=g",
    )  # fmt: skip
    try:
        yield srv
    finally:
        srv.stop()


def _touch(marker: Path) -> dict[str, Any]:
    return {"command": f"touch {marker}"}


def _path(marker: Path) -> dict[str, Any]:
    return {"path": str(marker)}


# (env name, env_kwargs that would run the payload, what the error says)
ESCAPES = [
    (f"{MOD}:os.system", _touch, "is not allowed"),  # '*' never matches a dot
    (f"{MOD}:subprocess.getoutput", lambda m: {"cmd": f"touch {m}"}, "is not allowed"),
    (f"{MOD}:Holder.tool.system", _touch, "a module"),  # the pattern spells it, but Holder.tool is os
    (f"{MOD}:__class__", _path, "starts with '_'"),
    (f"{MOD}:__builtins__", lambda m: {"source": f"open({str(m)!r}, 'w')"}, "starts with '_'"),
    (f"{MOD}:_private_factory", _path, "starts with '_'"),
    (f"{MOD}:os", _path, "a module"),
    (f"{MOD}:shell", _path, "a module"),
    (f"{MOD}:subprocess", _path, "a module"),
    (f"{MOD}:mark", _path, "functools.partial"),
    (f"{MOD}:system", _touch, "defined in"),  # `from os import system`
    (f"{MOD}:mark_bound", _path, "defined in"),
    ("tests.envs.hosts_only:system", _touch, "defined in"),  # refused by the worker, before it calls anything
    ("tests.envs.broken_import:make", lambda m: {}, "cannot import module 'tests.envs.broken_import'"),
    (f"{MOD}:EscapeEnv-v0", lambda m: {"entry_point": f"{MOD}:write_marker", **_path(m)}, "'entry_point'"),
    ("CartPole-v1", lambda m: {"entry_point": f"{MOD}:write_marker", **_path(m)}, "'entry_point'"),
    ("CartPole-v1", lambda m: {"apply_api_compatibility": True, **_path(m)}, "--allow-env-kwargs"),
    ("tests.envs.chaotic:Pendulum-v1", lambda m: {}, "is not allowed"),  # 'module:EnvId' imports the module
    ("os:Pendulum-v1", lambda m: {}, "is not allowed"),
]


@pytest.mark.parametrize(("env", "kwargs", "says"), ESCAPES, ids=[f"{e[0]}-{i}" for i, e in enumerate(ESCAPES)])
async def test_an_escape_is_refused_and_runs_nothing(
    server: ServerProcess, tmp_path: Path, env: str, kwargs: Any, says: str
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(UsageError, match=says) as caught:
        await aioenv.make(env, 1, endpoint=server.endpoint, env_kwargs=kwargs(marker))
    assert repr(env) in caught.value.message, caught.value.message  # the error names the env
    assert not marker.exists(), f"{env} ran its payload"


LEGIT = [
    (f"{MOD}:make_env", {"size": 4}, (4,)),
    (f"{MOD}:EscapeEnv", {"size": 2}, (2,)),
    (f"{MOD}:Holder.make", {"size": 5}, (5,)),
    ("tests.envs.hosts_only:make_env", {"size": 6}, (6,)),
    (f"{MOD}:EscapeEnv-v0", {}, (3,)),  # gymnasium's 'module:EnvId', the module allowed
    ("CartPole-v1", {"sutton_barto_reward": True, "max_episode_steps": 10}, (4,)),
    ("Acrobot-v1", {}, (6,)),
    ("Pendulum-v1", {"g": 9.0}, (3,)),
]


@pytest.mark.parametrize(("env", "kwargs", "shape"), LEGIT, ids=[e[0] for e in LEGIT])
async def test_what_the_allow_list_names_works(
    server: ServerProcess, env: str, kwargs: dict[str, Any], shape: tuple[int, ...]
) -> None:
    async with aioenv.Pool(env, 1, endpoint=server.endpoint, env_kwargs=kwargs) as pool:
        obs, _ = await pool.reset(seed=0)
        assert np.asarray(obs).shape == (1, *shape)


@pytest.mark.parametrize(
    ("env", "kwargs"),
    [("Acrobot-v1", {"render_mode": "rgb_array"}), ("CartPole-v1", {"render_mode": "rgb_array"}),
     ("Pendulum-v1", {"g": 9.0, "max_torque": 5.0}), ("Ant-v5", {"xml_file": "/etc/passwd"})],
)  # fmt: skip
async def test_env_kwargs_need_the_operators_leave(server: ServerProcess, env: str, kwargs: dict[str, Any]) -> None:
    refused = next(k for k in kwargs if k not in ("g",))
    with pytest.raises(UsageError) as caught:
        await aioenv.make(env, 1, endpoint=server.endpoint, env_kwargs=kwargs)
    message = caught.value.message
    assert repr(env) in message, message
    assert f"env_kwargs {refused!r}" in message, message
    assert "--allow-env-kwargs" in message, message


async def test_calls_never_reach_private_names(server: ServerProcess) -> None:
    async with aioenv.Pool(f"{MOD}:make_env", 2, endpoint=server.endpoint) as pool:
        await pool.reset(seed=0)
        for name in ("__class__", "__init__", "_np_random", "__dict__", "unwrapped.close", "np_random.bit_generator"):
            with pytest.raises(UsageError, match=f"{name!r}"):
                await pool.call(name)
            with pytest.raises(UsageError, match=f"{name!r}"):
                await pool.get_attr(name)
        for name in ("__class__", "__setattr__", "_np_random", "spec.id"):
            with pytest.raises(UsageError, match=f"{name!r}"):
                await pool.set_attr(name, [0, 0])
        for through in ("get_wrapper_attr", "has_wrapper_attr"):
            with pytest.raises(UsageError, match="'__class__'"):
                await pool.call(through, "__class__")
        with pytest.raises(UsageError, match="'_np_random'"):
            await pool.call("set_wrapper_attr", "_np_random", None)
        with pytest.raises(UsageError, match="'__dict__'"):  # as a hostile client sends it: the name as a keyword
            await pool._call("call", "get_wrapper_attr", None, args=[], kw={"name": "__dict__"})
        assert await pool.get_attr("metadata") == [{"render_modes": []}] * 2  # a public name still works
        assert await pool.call("get_wrapper_attr", "metadata") == [{"render_modes": []}] * 2
        obs, *_ = await pool.step(np.zeros(2, dtype=np.int64))
        assert obs.shape == (2, 3)  # the pool is unharmed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--allow-env", "mypkg.envs:_make"), "starts with '_'"),
        (("--allow-env", "mypkg:envs:*"), "expected PATTERN or MODULE_PATTERN:FACTORY_PATTERN"),
        (("--allow-env-kwargs", "CartPole-v1"), "expected ENV_PATTERN=NAME"),
        (("--allow-env-kwargs", "CartPole-*=entry_point"), "would point gymnasium at other code"),
    ],
)
def test_a_server_refuses_to_start_with_what_it_could_never_serve(args: tuple[str, ...], says: str) -> None:
    cmd = [sys.executable, "-m", "aioenv.cli", "serve", "--bind", "tcp://127.0.0.1:0", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG, check=False)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr, done.stderr
