"""Workers import what their caller imports: the caller's ``sys.path`` in its order, run-time additions included,
and aioenv's own ``workers`` package whatever modules the user has (issue: envs defined in a test module or a
notebook's directory failed with ModuleNotFoundError; a package on the user's PYTHONPATH was shadowed in workers).

Each case runs a real script in a fresh interpreter, from a directory that is not the repo, with real worker
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.scripts import ROOT

ENV_MODULE = """
    import os
    import sys

    import gymnasium as gym
    import numpy as np

    import probe_order


    class PathEnv(gym.Env):
        observation_space = gym.spaces.Box(0, 1, (1,), np.float32)
        action_space = gym.spaces.Discrete(2)

        def __init__(self):
            self.search_path = list(sys.path)
            self.probe = probe_order.VALUE
            self.gymnasium_file = gym.__file__
            self.pythonpath = os.environ.get("PYTHONPATH")

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(1, np.float32), {}

        def step(self, action):
            return np.zeros(1, np.float32), 0.0, False, False, {}


    def make():
        return PathEnv()
"""

SCRIPT = """
    import asyncio
    import json
    import os
    import sys

    sys.path.insert(0, {late!r})     # as pytest's rootdir insertion or a notebook does, at run time
    sys.path.append({shadowed!r})    # a second probe_order, after the one on PYTHONPATH

    import aioenv
    import gymnasium
    import late_envs


    async def main():
        seen = {{}}
        for name, env in (("by name", "late_envs:make"), ("by reference", late_envs.PathEnv)):
            async with await aioenv.make(env, 2, num_workers=1) as pool:
                await pool.reset(seed=0)
                seen[name] = {{
                    "path": (await pool.get_attr("search_path"))[0],
                    "probe": (await pool.get_attr("probe"))[0],
                    "gymnasium": (await pool.get_attr("gymnasium_file"))[0],
                    "pythonpath": (await pool.get_attr("pythonpath"))[0],
                }}
        print(json.dumps({{
            "parent": sys.path, "cwd": os.getcwd(), "gymnasium": gymnasium.__file__,
            "pythonpath": os.environ.get("PYTHONPATH"), "seen": seen,
        }}))


    asyncio.run(main())
"""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _run(tmp_path: Path) -> dict[str, object]:
    late, shadowed, user, project = (tmp_path / d for d in ("late", "shadowed", "user", "project"))
    _write(late / "late_envs.py", ENV_MODULE)
    _write(user / "probe_order.py", "VALUE = 'user'\n")
    _write(shadowed / "probe_order.py", "VALUE = 'shadowed'\n")
    # A module of the user's named like aioenv's worker runtime, beside the script: it must not be run.
    _write(project / "workers.py", "raise SystemExit('the user module workers.py was imported')\n")
    _write(project / "run.py", SCRIPT.format(late=str(late), shadowed=str(shadowed)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(user)]))
    done = subprocess.run(
        [sys.executable, str(project / "run.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_workers_search_the_callers_path_in_its_order(tmp_path: Path) -> None:
    result = _run(tmp_path)
    parent, cwd = result["parent"], result["cwd"]
    assert isinstance(parent, list)
    assert isinstance(cwd, str)
    expected = list(dict.fromkeys([p or cwd for p in parent] + [cwd]))
    seen = result["seen"]
    assert isinstance(seen, dict)
    assert set(seen) == {"by name", "by reference"}
    for how, got in seen.items():
        assert got["path"] == expected, how
        # the PYTHONPATH directory comes before the one appended at run time, as in the caller
        assert got["probe"] == "user", how
        assert got["gymnasium"] == result["gymnasium"], how
        assert got["pythonpath"] == result["pythonpath"], how  # given back for what the envs start


SHADOWED_RUNTIME = """
    import asyncio, json
    import aioenv

    async def main():
        out = {}
        async with aioenv.Pool("CartPole-v1", 2, seed=0, allow_in_process=True) as pool:  # 2 cheap envs would run here
            obs, _ = await pool.reset()
            out["auto"] = [pool.executor, pool.envs_in_process, pool.placement_reason, obs.shape[0]]
        try:
            await aioenv.make("CartPole-v1", 2, executor="in_process")
        except aioenv.UsageError as exc:
            out["in_process"] = str(exc)
        print(json.dumps(out))

    asyncio.run(main())
"""


def test_a_users_workers_module_never_stands_in_for_the_runtime_in_the_callers_process(tmp_path: Path) -> None:
    """Envs run in the caller's process through aioenv's ``workers`` package: a ``workers.py`` beside the
    user's script is never imported; ``auto``, though allowed to place envs here, keeps them in worker
    processes and says why, and ``executor="in_process"`` refuses with the reason."""
    _write(tmp_path / "workers.py", "raise SystemExit('the user module workers.py was imported')\n")
    _write(tmp_path / "run.py", SHADOWED_RUNTIME)
    done = subprocess.run(
        [sys.executable, str(tmp_path / "run.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    executor, here, why, rows = out["auto"]
    assert (executor, here, rows) == ("inline", 0, 2)
    assert f"the module named 'workers' this process imports is {tmp_path / 'workers.py'}" in why
    assert "executor='in_process' cannot run here" in out["in_process"]
    assert "not aioenv's worker runtime" in out["in_process"]
