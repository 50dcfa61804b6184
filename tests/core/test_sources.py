"""Env sources a client over the network named (``"strict": true``), as a worker resolves them, and the allow-list
that a server checks names and env_kwargs against first (:mod:`aioenv.server.allow`): pure logic, real imports.

The worker's check is the last line: it holds even where a server's own check was skipped (a module the server
cannot import, left to its worker hosts), so every escape here goes to :func:`workers.sources.resolve` directly
and must fail before anything is called.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from aioenv.core.sources import parse_sources
from aioenv.errors import UsageError
from aioenv.server.allow import AllowList, KwargsRule, compile_pattern
from tests.envs import escapes
from workers.sources import SourceError, reach, resolve

MOD = "tests.envs.escapes"


def _entry(target: str, kwargs: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    return {"kind": "entry", "target": target, "kwargs": kwargs, "strict": strict}


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("os.system", "a module ('os')"),
        ("Holder.tool.system", "leads through a module ('os')"),
        ("__builtins__", "starts with '_'"),
        ("_private_factory", "starts with '_'"),
        ("EscapeEnv.__init__", "starts with '_'"),
        ("os", "a module ('os')"),
        ("shell", "a module ('os')"),
        ("mark", "a functools.partial"),
        ("system", "defined in 'posix'"),
        ("mark_bound", "defined in 'pathlib'"),
        ("Holder", None),  # a class defined here: allowed (the control row)
    ],
)
def test_a_strict_source_reaches_only_what_the_module_defines(tmp_path: Path, target: str, says: str | None) -> None:
    marker = tmp_path / "ran"
    kwargs = {"command": f"touch {marker}"} if "system" in target else {"path": str(marker)}
    if says is None:
        assert resolve(_entry(f"{MOD}:{target}", {}), None)() is not None
        return
    with pytest.raises(UsageError, match=re.escape(f"env '{MOD}:{target}'") + ".*" + re.escape(says)):
        resolve(_entry(f"{MOD}:{target}", kwargs), None)
    assert not marker.exists()


def test_what_a_strict_source_may_make() -> None:
    assert resolve(_entry(f"{MOD}:make_env", {"size": 4}), None)().observation_space.shape == (4,)
    assert resolve(_entry(f"{MOD}:EscapeEnv", {"size": 2}), None)().observation_space.shape == (2,)
    assert resolve(_entry(f"{MOD}:Holder.make", {"size": 5}), None)().observation_space.shape == (5,)
    env = resolve(_entry(f"{MOD}:EscapeEnv-v0", {}), None)()  # gymnasium's 'module:EnvId', registered there
    assert env.unwrapped.observation_space.shape == (3,)
    assert reach(f"{MOD}:EscapeEnv-v0") is None
    with pytest.raises(SourceError, match="registers no such gymnasium id"):
        reach(f"{MOD}:Nothing-v0")
    with pytest.raises(SourceError, match=re.escape("'tests.envs.escapes:Holder' has no 'nothing'")):
        reach(f"{MOD}:Holder.nothing")


def test_a_strict_source_never_points_gymnasium_elsewhere_nor_loads_a_pickle(tmp_path: Path) -> None:
    gym = {"kind": "gym", "id": "CartPole-v1", "kwargs": {"entry_point": f"{MOD}:write_marker"}, "strict": True}
    with pytest.raises(UsageError, match="'entry_point' would point gymnasium at other code"):
        resolve(gym, None)
    with pytest.raises(UsageError, match=re.escape("a gymnasium id or 'pkg.module:factory'")):
        resolve({"kind": "pickle", "path": str(tmp_path / "f.pkl"), "strict": True}, str(tmp_path))
    with pytest.raises(UsageError, match="'strict' must be true or false"):
        resolve(_entry(f"{MOD}:make_env", {}, strict="yes"), None)  # type: ignore[arg-type]


def test_a_local_pools_own_names_keep_their_freedom(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    resolve(_entry(f"{MOD}:mark", {"path": str(marker)}, strict=False), None)()
    assert marker.exists()  # the caller chose it in its own process
    sources, _ = parse_sources(f"{MOD}:mark", 1, None, None)
    assert "strict" not in sources.sources["0"]
    sources, _ = parse_sources(f"{MOD}:mark", 1, None, None, strict=True)
    assert sources.sources["0"]["strict"] is True


def test_the_workers_check_names_the_env_before_anything_is_called() -> None:
    with pytest.raises(SourceError, match=r"env 'tests.envs.escapes:system' is a builtin_function_or_method"):
        reach(f"{MOD}:system")
    with pytest.raises(SourceError, match=r"cannot import module 'no_such_module_here'"):
        reach("no_such_module_here:make")
    assert reach(f"{MOD}:make_env") is escapes.make_env
    assert escapes.make_env().observation_space.shape == (3,)


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("CartPole-*", "CartPole-v1", True),
        ("CartPole-*", "CartPole-v1:x", False),
        ("*", "os:system", False),  # no colon in the pattern: gymnasium ids only
        ("*", "ALE/Pong-v5", True),
        ("*Pole-v1", "tests.envs.chaotic:CartPole-v1", False),
        ("mypkg.envs:*", "mypkg.envs:make", True),
        ("mypkg.envs:*", "mypkg.envs:os.system", False),
        ("mypkg.envs:m?ke", "mypkg.envs:make", True),
        ("mypkg.envs:*", "mypkg.envs:Env-v0", True),
        ("mypkg.*:*", "mypkg.envs.sub:make", True),  # the module's side may span packages
        ("mypkg.envs:Envs.make", "mypkg.envs:Envs.make", True),  # spelled out
        ("mypkg.envs:Envs*", "mypkg.envs:Envs.make", False),
        ("mypkg.envs:[a-z]*", "mypkg.envs:make", True),
        ("mypkg.envs:[!A-Z]*", "mypkg.envs:.make", False),
        ("mypkg.envs:mak[!a]", "mypkg.envs:mak.", False),
    ],
)
def test_patterns_name_factories_never_paths(pattern: str, name: str, matches: bool) -> None:
    assert bool(compile_pattern(pattern).fullmatch(name)) is matches


@pytest.mark.parametrize(
    ("check", "spec", "says"),
    [
        (compile_pattern, "mypkg:_make", "starts with '_'"),
        (compile_pattern, "mypkg._impl:*", "starts with '_'"),
        (compile_pattern, "a:b:c", "expected PATTERN"),
        (compile_pattern, ":make", "expected PATTERN"),
        (KwargsRule.parse, "CartPole-v1", "expected ENV_PATTERN=NAME"),
        (KwargsRule.parse, "CartPole-v1=", "expected ENV_PATTERN=NAME"),
        (KwargsRule.parse, "CartPole-v1=a b", "no keyword argument name"),
        (KwargsRule.parse, "CartPole-v1=entry_point", "other code"),
        (KwargsRule.parse, "x:_y=a", "starts with '_'"),
    ],
)
def test_patterns_and_rules_that_could_never_be_served_are_refused(check: Any, spec: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        check(spec)


def test_env_kwargs_none_by_default_named_per_pattern() -> None:
    allow = AllowList(["CartPole-*", "Ant-v5"], ["CartPole-*=sutton_barto_reward, max_episode_steps", "Ant-*=*"])
    allow.check("CartPole-v1", {"sutton_barto_reward": True, "max_episode_steps": 5})
    allow.check("Ant-v5", {"ctrl_cost_weight": 0.1})
    with pytest.raises(UsageError, match=r"'CartPole-v1': env_kwargs 'render_mode' .*'max_episode_steps', 'sutton"):
        allow.check("CartPole-v1", {"render_mode": "human"})
    with pytest.raises(UsageError, match="'entry_point' would point gymnasium at other code"):
        allow.check("Ant-v5", {"entry_point": "os:system"})
    with pytest.raises(UsageError, match=r"it allows none\); its operator allows it with --allow-env-kwargs"):
        AllowList().check("Ant-v5", {"xml_file": "/etc/passwd"})
    with pytest.raises(UsageError, match="gymnasium ids only"):
        AllowList().check("os:system", {})
    with pytest.raises(UsageError, match="starts with '_'"):
        AllowList(["m:*"]).check("m:__class__", {})
