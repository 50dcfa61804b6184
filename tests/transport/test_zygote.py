"""Workers forked from a template process (aioenv.transport.zygote, workers/zygote.py): each looks as a fresh
``python -m workers`` would (its descriptors, session, directory, environment, random state, command line),
one template serves a process's pools, a changed environment gets its own, a template's death takes its
workers and the pool starts new ones, no worker outlives the process that started it, and
``AIOENV_WORKER_START=exec`` starts them afresh."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
from aioenv.errors import EnvRemade, UsageError, WorkerCrashed
from aioenv.transport import spawn, zygote
from aioenv.transport.spawn import worker_command
from tests.support.procs import HANG, TEMPLATE, process_gone
from tests.support.scripts import run_python

MARKER = "AIOENV_TEST_ZYGOTE_MARKER"


@pytest.fixture(autouse=True)
def _fork(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zygote.WORKER_START_ENV, "fork")


class Inspect(gym.Env[np.ndarray, np.int64]):
    """Reports, in its reset info, what its worker process looks like from inside."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        links = []
        for name in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{name}"))
            except OSError:
                continue
        with open("/proc/self/cmdline", "rb") as fh:
            cmdline = fh.read().replace(b"\0", b" ").decode().strip()
        info = {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "sid": os.getsid(0),
            "cwd": os.getcwd(),
            "marker": os.environ.get(MARKER, ""),
            "random": float(np.random.random()),
            "cmdline": cmdline,
            "pidfds": sum("pidfd" in link for link in links),
        }
        return np.zeros(1, np.float32), info

    def step(self, action: np.int64) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        return np.zeros(1, np.float32), 1.0, False, False, {}


async def _look(n: int = 2) -> dict[str, list[Any]]:
    """The reset info of a pool of ``n`` Inspect envs on ``n`` inline workers, one list per key (once the
    template of this environment is ready: until then, workers start afresh)."""
    spawn.warm_up(HANG)
    async with aioenv.Pool(Inspect, n, num_workers=n, executor="inline") as pool:
        _, info = await asyncio.wait_for(pool.reset(), HANG)
    return {key: list(info[key]) for key in ("pid", "ppid", "sid", "cwd", "marker", "random", "cmdline", "pidfds")}


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode()


async def test_workers_are_forks_of_one_template_that_look_like_fresh_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(MARKER, "first")
    seen = await _look()
    template = seen["ppid"][0]
    assert seen["ppid"] == [template, template]
    assert template != os.getpid()
    assert TEMPLATE in _cmdline(template)
    assert seen["sid"] == seen["pid"]  # each leads a session (and process group) of its own
    assert seen["cwd"] == [str(tmp_path)] * 2
    assert seen["marker"] == ["first"] * 2
    assert seen["random"][0] != seen["random"][1]  # numpy's global generator seeded afresh in each
    for cmdline in seen["cmdline"]:
        assert cmdline.startswith(f"{sys.executable} -P -m workers --fd ")
        assert "--name " in cmdline
        assert f"--parent-pid {template}" in cmdline
    assert seen["pidfds"] == [0, 0]  # nothing of the template's (its children's pidfds) is left open
    again = await _look()
    assert again["ppid"] == [template, template]  # the next pool's workers come from the same template
    assert set(again["pid"]).isdisjoint(seen["pid"])


async def test_a_changed_environment_gets_a_template_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARKER, "a")
    a = await _look(1)
    monkeypatch.setenv(MARKER, "b")
    b = await _look(1)
    assert a["marker"] == ["a"]
    assert b["marker"] == ["b"]
    assert a["ppid"] != b["ppid"]  # a template's imports were made under its environment


@pytest.mark.parametrize("start", ["exec", None])
async def test_exec_and_the_default_start_fresh_interpreters(
    monkeypatch: pytest.MonkeyPatch, start: str | None
) -> None:
    if start is None:
        monkeypatch.delenv(zygote.WORKER_START_ENV)
    else:
        monkeypatch.setenv(zygote.WORKER_START_ENV, start)
    seen = await _look()
    assert seen["ppid"] == [os.getpid()] * 2
    assert all(c.startswith(f"{sys.executable} -P -m workers --fd ") for c in seen["cmdline"])


async def test_a_template_still_importing_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MARKER, "just started")  # an environment no template was started for
    async with aioenv.Pool(Inspect, 1, num_workers=1, executor="inline") as pool:
        _, info = await asyncio.wait_for(pool.reset(), HANG)
    assert info["ppid"].tolist() == [os.getpid()]  # started afresh while the template makes its imports
    seen = await _look(1)  # and, once it has, forked from it
    assert seen["ppid"] != [os.getpid()]
    assert TEMPLATE in _cmdline(seen["ppid"][0])


async def test_with_no_room_for_another_template_workers_start_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zygote, "MAX_TEMPLATES", 0)
    monkeypatch.setenv(MARKER, "no room")  # an environment no template was started for
    seen = await _look(1)
    assert seen["ppid"] == [os.getpid()]


async def test_a_bad_worker_start_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zygote.WORKER_START_ENV, "vfork")
    with pytest.raises(UsageError, match=r"AIOENV_WORKER_START must be 'fork' or 'exec', got 'vfork'"):
        await aioenv.make("CartPole-v1", 1, num_workers=1)


async def test_a_template_that_dies_takes_its_workers_and_the_pool_starts_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(MARKER, "doomed")  # a template of this test's own
    assert spawn.warm_up(HANG)
    async with aioenv.Pool(Inspect, 2, num_workers=2, executor="inline") as pool:
        _, info = await asyncio.wait_for(pool.reset(), HANG)
        template, workers = int(info["ppid"][0]), [int(p) for p in info["pid"]]
        assert TEMPLATE in _cmdline(template)
        os.kill(template, signal.SIGKILL)
        async with asyncio.timeout(HANG):
            while not all(process_gone(pid) for pid in workers):
                await asyncio.sleep(0.02)
            while True:  # the pool notices, fails what was in flight, and makes the envs again
                try:
                    _, info = await pool.reset()
                    break
                except (EnvRemade, WorkerCrashed):
                    await asyncio.sleep(0.05)
        await asyncio.wait_for(pool.step(np.zeros(2, dtype=np.int64)), HANG)
        assert template not in info["ppid"].tolist()
        assert set(info["pid"].tolist()).isdisjoint(workers)


def test_a_worker_that_exits_at_once_reports_its_code_and_writes_to_this_process_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    cmd, env = worker_command([], module="workers.zygote")
    assert zygote.start_template(cmd, env, HANG)
    proc = zygote.fork_worker(cmd, env, ["--fd", "999", "--name", "nobody"], [])
    assert proc is not None
    assert proc.wait(HANG) == 2  # argparse's usage error
    assert "--fd 999: not an open descriptor" in capfd.readouterr().err
    proc.send_signal(signal.SIGTERM)  # reaped: nothing happens


def test_a_forked_worker_can_be_signalled_and_its_death_is_reported() -> None:
    import socket

    ours, theirs = socket.socketpair()
    with ours, theirs:
        cmd, env = worker_command([], module="workers.zygote")
        assert zygote.start_template(cmd, env, HANG)
        proc = zygote.fork_worker(cmd, env, ["--fd", str(theirs.fileno()), "--name", "w"], [theirs.fileno()])
        assert proc is not None
        assert ours.recv(1)  # it started and speaks on the descriptor it was given
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(HANG) == -signal.SIGTERM
        assert proc.returncode == -signal.SIGTERM


def test_no_worker_outlives_a_process_killed_with_its_pool(tmp_path: Path) -> None:
    script = tmp_path / "killed.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal
            import aioenv
            from aioenv.transport.spawn import warm_up
            os.environ["AIOENV_WORKER_START"] = "fork"
            assert warm_up(30)
            pool = aioenv.SyncPool("CartPole-v1", 2, num_workers=2, executor="inline")
            pool.reset()
            pids = [s.proc.pid for s in pool.pool._runner.slots]
            print(os.getpid(), " ".join(map(str, pids)), flush=True)
            print(open(f"/proc/{pids[0]}/stat").read().split(")")[1].split()[1], flush=True)  # its parent
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    proc = run_python(str(script), timeout=HANG * 2)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    first, template = proc.stdout.splitlines()
    script, *workers = (int(p) for p in first.split())
    assert int(template) != script  # the workers were forked from the template
    pids = [*workers, int(template)]
    deadline = time.monotonic() + HANG
    while not all(process_gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"left behind: {[p for p in pids if not process_gone(p)]}"
        time.sleep(0.05)


def test_a_forked_child_of_this_process_starts_a_template_of_its_own() -> None:
    before = asyncio.run(_look(1))["ppid"][0]  # this process's template exists
    pid = os.fork()
    if pid == 0:  # the child: its pool must not talk to its parent's template
        code = 1
        try:
            seen = asyncio.run(_look(1))
            code = 0 if seen["ppid"][0] != before and TEMPLATE in _cmdline(seen["ppid"][0]) else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(_look(1))["ppid"][0] == before  # and the parent's still serves the parent


def test_a_template_whose_launcher_closed_its_end_while_it_warmed_up_exits_quietly() -> None:
    """A command that fails at once (``aioenv bench NoSuchEnv-v0``) closes its end of the template's socket before
    the template has imported what it preloads: the template then had nothing to say it was ready to, and printed
    the BrokenPipeError of its reply to the stderr it shares with the command."""
    cmd, env = worker_command([], module="workers.zygote")
    mine, theirs = socket.socketpair()
    with mine, theirs:
        args = [*cmd, "--fd", str(theirs.fileno()), "--parent-pid", str(os.getpid())]
        proc = subprocess.Popen(args, env=env, pass_fds=[theirs.fileno()], stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_a_template_answers_a_malformed_request_with_an_error_and_goes_on_forking() -> None:
    cmd, env = worker_command([], module="workers.zygote")
    assert zygote.start_template(cmd, env, HANG)
    template = zygote._template(cmd, env, False)
    assert template is not None
    with template.lock:
        template.sock.send(b"{not json")
        reply = template.sock.recv(1 << 16)
    assert "malformed request" in json.loads(reply)["error"]
    proc = zygote.fork_worker(cmd, env, ["--fd", "999", "--name", "nobody"], [])
    assert proc is not None  # the same template forks the next worker
    assert zygote._template(cmd, env, False) is template
    assert proc.wait(HANG) == 2  # argparse's usage error: it ran


async def test_a_template_that_cannot_fork_leaves_the_pool_to_start_its_workers_afresh(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(MARKER, "refusing")  # a template of this test's own
    assert spawn.warm_up(HANG)

    def refuse(self: Any, argv: Any, env: Any, pass_fds: Any) -> Any:
        raise zygote.ZygoteError("the worker template refused to fork: fork failed: [Errno 11] try again")

    monkeypatch.setattr(zygote._Template, "fork", refuse)
    with caplog.at_level("WARNING", logger="aioenv.launcher"):
        async with aioenv.Pool(Inspect, 1, num_workers=1, executor="inline") as pool:
            _, info = await asyncio.wait_for(pool.reset(), HANG)
    assert info["ppid"].tolist() == [os.getpid()]  # started afresh
    assert any("could not fork a worker from its template" in r.getMessage() for r in caplog.records)
