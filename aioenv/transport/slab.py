"""Shared-memory rows between a pool and its own worker processes: actions in, results out.

A pool whose workers are its own child processes (any executor: ``inline``, ``thread``, ``async``) keeps one
*slab*: an anonymous shared-memory file (``memfd_create``) holding, for every env of the pool, a row of each
action leaf, each observation leaf, and the reward, terminated and truncated of its last step:

    act leaves   (num_envs, *shape)  written by the pool before a STEP is sent
    obs leaves   (num_envs, *shape)  written by the worker before it replies
    reward (num_envs,) float64, terminated (num_envs,) bool, truncated (num_envs,) bool
                                     written by the worker before it replies (Slab.put_extras)
    final obs  (num_envs, *shape)  a same_step pool's only: written by the worker before it replies

Rows are indexed by env id. A STEP or RESET that says ``"sh": 1`` carries no arrays: the worker reads
the actions of its envs from their rows and writes their results into them, and its RESULT, also
``"sh": 1``, carries only what is not an array (infos, errors). This saves serialising arrays on
both sides of the pipe and copying them through it, one copy of every row each way. A ``thread`` or
``async`` worker writes each row as it finishes and names them in its RESULT (``"multi"``, see
:mod:`workers.concurrent`), whatever requests they answer; the pool leaves ``recv()``'s step rows with no info
and no error where they lie until ``recv()`` copies them, and copies any other out as the reply comes.

Why rows cannot be overwritten while someone still reads them: an env has at most one request in
flight, and a reply's rows are copied out by whoever takes them (a batched call's gather, a per-env
future) before the env can be given another request; rows of ``send`` results wait, unread, in
``recv()``'s queue, and the scheduler refuses new requests for such envs until ``recv()`` took them.
A worker killed for a deadline dies long before its replacement (a fresh process) can write anything.

The descriptor is created before the workers start (it is inherited, ``--slab FD``) and sized once
the envs' spaces are known; a restarted worker maps it again. Observation or action spaces with a
``Text`` leaf (object arrays) cannot live in shared memory: such pools, workers reached over ZeroMQ and
envs on threads or coroutines of the pool's own process (``num_workers=0``) exchange arrays inside the
messages as before. ``AIOENV_SLAB=off`` turns slabs off.

*Final observations.* With ``autoreset_mode="same_step"`` an episode's end carries the ended episode's last
observation in the row's info (``final_obs``). For about a third of a lock-step batch of short-episode envs
(CartPole) that info was the only thing of a reply not in the slab, and it sent the reply the general way: a
msgpack RESULT, decoded and batched column by column, ~130 µs of the pool's process where a lane DONE costs a
few. So a same_step pool whose observation space is a Box of one array per row gets one more area, the final
observations, one row per env. A worker answering a lane step that asks for it (:data:`aioenv.wire.lane.FINALS`)
writes each ended env's final observation there and says DONE, when that and an empty ``final_info`` is all its
infos would have said; the pool then builds ``final_obs``/``final_info`` and their masks from the rows that ended
(terminated or truncated), as gymnasium's ``SyncVectorEnv`` does (:mod:`aioenv.core.sinks`). Anything else (a
reset info, a final info, an observation of another dtype or shape) goes in the reply as before.

*Infos.* Envs that return numeric infos every step get one more area once the pool has seen their keys: the file
grows by it and the workers map the slab's layout again (:mod:`aioenv.transport.slab_infos`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
from collections.abc import Sequence
from typing import Any

import gymnasium.spaces as gs
import numpy as np

from aioenv.errors import UsageError
from aioenv.transport.slab_infos import InfoArea
from aioenv.wire import spaces

__all__ = ["SLAB_ENV", "Slab", "slab_enabled"]

#: Environment variable: ``off`` makes pools exchange arrays in their messages instead of a slab.
SLAB_ENV = "AIOENV_SLAB"

_ALIGN = 64
#: One array of a slab: ``[dtype str, shape of one row, byte offset]``.
Entry = list[Any]


def slab_enabled() -> bool:
    """Whether new pools may use a slab: on Linux (``memfd_create``) unless ``AIOENV_SLAB=off``.

    Raises:
        UsageError: ``AIOENV_SLAB`` holds something other than ``on`` or ``off``.
    """
    value = os.environ.get(SLAB_ENV, "on").strip().lower() or "on"
    if value not in ("on", "off"):
        raise UsageError(f"{SLAB_ENV} must be 'on' or 'off', got {os.environ[SLAB_ENV]!r}")
    return value == "on" and sys.platform.startswith("linux") and hasattr(os, "memfd_create")


class Slab:
    """The shared rows of one pool (see the module docstring).

    Attributes:
        num_envs: rows in every array.
        layout: ``{"n": num_envs, "act": [Entry], "obs": [Entry], "x": [Entry], "fin": Entry, "size": bytes,
            "info": area}``, ``"fin"`` only with final observations, ``"info"`` only once an info area was added
            (:meth:`add_infos`) (msgpack-able: it travels to the workers, who map the same file with :meth:`attach`).
        act: action leaves, each ``(num_envs, *shape)``.
        obs: observation leaves, each ``(num_envs, *shape)``.
        reward: ``(num_envs,)`` float64; terminated, truncated: ``(num_envs,)`` bool.
        final: the final observations' leaf ``(num_envs, *shape)`` of a slab planned with ``finals``, else None.
        info: its info area (:class:`aioenv.transport.slab_infos.InfoArea`), once one was added, else None.
    """

    def __init__(self, fd: int, layout: dict[str, Any]) -> None:
        self.layout = layout
        self.num_envs = n = int(layout["n"])
        size = int(layout["size"])
        have = os.fstat(fd).st_size
        if have < size:
            raise ValueError(f"the slab file has {have} bytes, its layout needs {size}")
        self._map = mmap.mmap(fd, size) if size else None
        self.act = [self._view(entry, n) for entry in layout["act"]]
        self.obs = [self._view(entry, n) for entry in layout["obs"]]
        self.reward, self.terminated, self.truncated = (self._view(e, n) for e in layout["x"])
        fin = layout.get("fin")
        self.final: np.ndarray | None = None if fin is None else self._view(fin, n)
        self._info_map: mmap.mmap | None = None
        self.info: InfoArea | None = None
        area = layout.get("info")
        if area is not None:
            self._map_infos(fd, area)

    def _map_infos(self, fd: int, area: dict[str, Any]) -> None:
        at, size = int(area["at"]), int(area["size"])
        have = os.fstat(fd).st_size
        if at < int(self.layout["size"]) or at % mmap.PAGESIZE or have < at + size:
            raise ValueError(f"the info area at {at} of {size} bytes does not fit the slab file of {have} bytes")
        self._info_map = mmap.mmap(fd, size, offset=at)
        self.info = InfoArea(self._info_map, area, self.num_envs)

    def _view(self, entry: Entry, n: int) -> np.ndarray:
        dtype, shape, offset = entry
        shape = (n, *shape)
        count = int(np.prod(shape))
        return np.frombuffer(self._map, np.dtype(dtype), count, int(offset)).reshape(shape)  # type: ignore[arg-type]

    # ------------------------------------------------------------ making one

    @staticmethod
    def new_fd() -> int:
        """A fresh, empty shared-memory file (close-on-exec: pass it on explicitly)."""
        return os.memfd_create("aioenv-slab", os.MFD_CLOEXEC)

    @staticmethod
    def try_new_fd() -> int | None:
        """:meth:`new_fd` where slabs are enabled (:func:`slab_enabled`) and memfd is allowed, else None (a
        sandbox may refuse memfd): the pool's messages then carry the arrays."""
        if not slab_enabled():
            return None
        try:
            return Slab.new_fd()
        except OSError:
            return None

    @staticmethod
    def plan(num_envs: int, obs_space: Any, act_space: Any, finals: bool = False) -> dict[str, Any] | None:
        """The layout for these spaces, or None when a leaf cannot live in shared memory (an object leaf: text,
        Graph, Sequence, OneOf, user-defined). ``finals``: with an area of final observations (see the module),
        when the observation space is a Box of at least one dimension (else none is made)."""
        if spaces.has_object_leaves(obs_space) or spaces.has_object_leaves(act_space):
            return None
        obs_specs, act_specs = spaces.leaf_specs(obs_space), spaces.leaf_specs(act_space)
        offset = 0

        def place(dtype: str, shape: Sequence[int]) -> Entry:
            nonlocal offset
            entry: Entry = [dtype, list(shape), offset]
            nbytes = num_envs * int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            offset += -(-nbytes // _ALIGN) * _ALIGN
            return entry

        act = [place(d, s) for d, s in act_specs]
        obs = [place(d, s) for d, s in obs_specs]
        x = [place("<f8", ()), place("|b1", ()), place("|b1", ())]
        layout: dict[str, Any] = {"n": num_envs, "act": act, "obs": obs, "x": x}
        if finals and isinstance(obs_space, gs.Box) and len(obs_space.shape) >= 1:
            layout["fin"] = place(*obs_specs[0])
        layout["size"] = offset
        return layout

    @classmethod
    def create(cls, fd: int, layout: dict[str, Any]) -> Slab:
        """Size the file ``fd`` for ``layout`` and map it (the pool's side)."""
        os.ftruncate(fd, max(int(layout["size"]), 1))
        return cls(fd, layout)

    def add_infos(self, fd: int, area: dict[str, Any]) -> None:
        """Grow the file ``fd`` by the info area ``area`` (:func:`aioenv.transport.slab_infos.plan`, placed at
        :meth:`info_offset`) and map it (the pool's side); :attr:`layout` says so from now on, for the workers to
        map it too. A slab has at most one.

        Raises:
            ValueError: it has one already, or ``area`` does not lie past the rows.
        """
        if self.info is not None:
            raise ValueError("the slab has an info area already")
        os.ftruncate(fd, int(area["at"]) + int(area["size"]))
        self._map_infos(fd, area)
        self.layout = {**self.layout, "info": area}

    def info_offset(self) -> int:
        """Where an info area may begin in the file: the first page boundary past the rows."""
        return -(-max(int(self.layout["size"]), 1) // mmap.PAGESIZE) * mmap.PAGESIZE

    @classmethod
    def attach(cls, fd: int, layout: Any) -> Slab:
        """Map the file a pool made (a worker's side); ``ValueError`` when ``layout`` is malformed or
        does not fit the file."""
        try:
            return cls(fd, layout)
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ValueError(f"cannot map the pool's shared rows: {exc}") from exc

    # ------------------------------------------------------------ the pool's side

    def put_actions(self, env_ids: np.ndarray, leaves: Sequence[np.ndarray], every: bool = False) -> None:
        """Write checked action leaves (``len(env_ids)`` rows each) into the rows of ``env_ids``
        (``every``: ``env_ids`` is every env in order, written as one block).

        Raises:
            ValueError: a leaf's rows are not ``len(env_ids)`` (nothing of that leaf is written)."""
        for store, leaf in zip(self.act, leaves, strict=True):
            if every:
                store[...] = leaf
            elif store.ndim == 1:  # put: several times cheaper than fancy indexing on a few rows, but it would
                if leaf.shape != env_ids.shape:  # repeat a short leaf where indexing refuses it: refused here too
                    raise ValueError(f"expected {env_ids.size} action rows, got an array of shape {leaf.shape}")
                store.put(env_ids, leaf)
            else:
                store[env_ids] = leaf

    def put_extras(self, at: slice | np.ndarray | int, reward: Any, terminated: Any, truncated: Any) -> None:
        """Write a step's rewards, terminated and truncated flags into the rows ``at`` (a slice or ``(k,)`` intp
        rows with ``k`` values each, or one env id with one value each), as a worker does before it answers."""
        self.reward[at], self.terminated[at], self.truncated[at] = reward, terminated, truncated

    def results(self, env_ids: np.ndarray | slice, step: bool) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
        """Copies of the rows of ``env_ids`` (ids, or a slice of them: a run, copied without fancy indexing):
        observation leaves and, for a step, ``[reward, terminated, truncated]`` (None for a reset)."""
        if type(env_ids) is slice:  # a slice's rows are views of the slab: copied
            run = env_ids
            obs = [leaf[run].copy() for leaf in self.obs]
            if not step:
                return obs, None
            return obs, [self.reward[run].copy(), self.terminated[run].copy(), self.truncated[run].copy()]
        ids = env_ids  # take, not fancy indexing: several times cheaper on a few rows
        obs = [leaf.take(ids, 0) for leaf in self.obs]
        if not step:
            return obs, None
        return obs, [self.reward.take(ids), self.terminated.take(ids), self.truncated.take(ids)]

    def close(self) -> None:
        """Drop this object's views and unmap (a view someone else still holds keeps the mapping
        alive until it goes)."""
        self.act = self.obs = []
        self.final = None
        self.info = None
        if self._info_map is not None:
            with contextlib.suppress(BufferError):
                self._info_map.close()
            self._info_map = None
        self.reward = self.terminated = self.truncated = np.empty(0)
        if self._map is not None:
            with contextlib.suppress(BufferError):  # a caller holds a view: the mapping goes with the last one
                self._map.close()
            self._map = None
