"""Envs that wait on demand, for the ``thread`` and ``async`` executor tests.

Action ``Discrete(4)``: ``INSTANT``; ``SHORT`` (sleep ``short`` s); ``HANG`` (an hour: only a deadline
ends it); ``MEET`` (wait until ``parties`` envs of this worker process are inside ``step`` at once:
only possible when steps overlap; gives up after ``meet_timeout`` s with ``TimeoutError``).
Observation ``[ident, t]`` (float64). Info: ``running`` (steps of this process inside ``step`` when this
one started, itself included), ``thread`` (the ident of the thread that ran the step).
``reset(options={"hang": True})`` hangs. :meth:`thread_id` returns the calling thread's ident,
:meth:`gc_threshold` the collector's thresholds of the process the env runs in.

:class:`WaitEnv` (gymnasium, blocking ``time.sleep``) and :class:`AsyncWaitEnv` (coroutines; with
``block_loop=True`` its ``HANG`` blocks the whole event loop with ``time.sleep``). Both count their
``close`` calls per process in ``closed``.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

import gymnasium as gym
import numpy as np

from aioenv import AsyncEnv

INSTANT, SHORT, HANG, MEET = 0, 1, 2, 3
_lock = threading.Lock()
_running = 0
_closed = 0
_meet: dict[int, threading.Barrier] = {}
_ameet: dict[int, list[asyncio.Future[None]]] = {}


def _spaces() -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
    return gym.spaces.Box(-np.inf, np.inf, (2,), np.float64), gym.spaces.Discrete(4)


class _Base:
    def __init__(self, ident: int = 0, short: float = 0.2, parties: int = 2, meet_timeout: float = 20.0) -> None:
        self.observation_space, self.action_space = _spaces()
        self.ident = ident
        self.short = short
        self.parties = parties
        self.meet_timeout = meet_timeout
        self.t = 0
        self.made_on = threading.get_ident()

    def obs(self) -> np.ndarray:
        return np.array([self.ident, self.t], dtype=np.float64)

    def thread_id(self) -> int:
        """The ident of the thread this call runs on."""
        return threading.get_ident()

    def gc_threshold(self) -> tuple[int, int, int]:
        """The cyclic collector's thresholds in the process this env runs in."""
        return gc.get_threshold()

    @property
    def closed(self) -> int:
        """How many envs of this process were closed."""
        return _closed

    @staticmethod
    def _enter() -> int:
        global _running
        with _lock:
            _running += 1
            return _running

    @staticmethod
    def _leave() -> None:
        global _running, _closed
        with _lock:
            _running -= 1

    def _result(self, running: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.obs(), 1.0, False, False, {"running": running, "thread": threading.get_ident()}


def _count_close() -> None:
    global _closed
    with _lock:
        _closed += 1


class WaitEnv(_Base, gym.Env[np.ndarray, np.int64]):
    """Blocking variant (see the module docstring)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if options and options.get("hang"):
            time.sleep(3600)
        self.t = 0
        return self.obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if threading.get_ident() != self.made_on:
            raise RuntimeError("stepped on another thread than the one that made the env")
        running = self._enter()
        try:
            if action == SHORT:
                time.sleep(self.short)
            elif action == HANG:
                time.sleep(3600)
            elif action == MEET:
                with _lock:
                    barrier = _meet.setdefault(self.parties, threading.Barrier(self.parties))
                try:
                    barrier.wait(self.meet_timeout)
                except threading.BrokenBarrierError:
                    raise TimeoutError(f"{self.parties} steps never overlapped") from None
            return self._result(running)
        finally:
            self._leave()

    def close(self) -> None:
        _count_close()


class AsyncWaitEnv(_Base, AsyncEnv[np.ndarray, np.int64]):
    """Coroutine variant (see the module docstring)."""

    def __init__(self, *args: Any, block_loop: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.block_loop = block_loop

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        if options and options.get("hang"):
            await asyncio.sleep(3600)
        self.t = 0
        return self.obs(), {}

    async def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        running = self._enter()
        try:
            if action == SHORT:
                await asyncio.sleep(self.short)
            elif action == HANG:
                if self.block_loop:
                    time.sleep(3600)
                await asyncio.sleep(3600)
            elif action == MEET:
                waiting = _ameet.setdefault(self.parties, [])
                me = asyncio.get_running_loop().create_future()
                waiting.append(me)
                if len(waiting) == self.parties:
                    for fut in waiting:
                        fut.set_result(None)
                    waiting.clear()
                try:
                    await asyncio.wait_for(me, self.meet_timeout)
                except TimeoutError:
                    raise TimeoutError(f"{self.parties} steps never overlapped") from None
            return self._result(running)
        finally:
            self._leave()

    async def close(self) -> None:
        _count_close()


class TextEchoEnv(AsyncEnv[str, str]):
    """Text in, text out: the observation is ``"<prompt>:<last action reversed>"``; reward is the action's length."""

    def __init__(self, prompt: str = "q") -> None:
        self.observation_space = gym.spaces.Text(64)
        self.action_space = gym.spaces.Text(32)
        self.prompt = prompt

    async def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        return f"{self.prompt}:", {}

    async def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        await asyncio.sleep(0)
        return f"{self.prompt}:{action[::-1]}", float(len(action)), action == "stop", False, {"echo": action}
