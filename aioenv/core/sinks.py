"""Turning worker replies into what callers get: batched tuples, per-env results, errors.

A worker's reply to one request is decoded into a :class:`Part` (its rows, in the
request's env order). Three kinds of :class:`Sink` consume parts:

- :class:`Gather` waits for every row of a batched call (``step``, ``reset``,
  ``call``) and assembles rows in the caller's env order;
- :class:`RecvQueue` keeps rows from ``send``/``send_reset`` in the order they
  finished until ``recv`` takes them; nothing is dropped on a timeout;
- :class:`Single` resolves one env's future (``step_env``/``reset_env``).

An env that failed has an error instead of a row. It fails only its own row:
``Gather`` raises the first error after all parts arrived, with the other rows
in ``error.partial``; ``RecvQueue`` hands the error out as the reply of that row.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

from aioenv.errors import AioEnvError, ProtocolError
from aioenv.transport.slab import Slab
from aioenv.transport.slab_infos import InfoArea
from aioenv.wire import spaces
from aioenv.wire.infos import UnmergedInfo, batch_infos, concat_infos, merge_infos, take_info, whole_info

__all__ = ["Gather", "Part", "RecvQueue", "ResetResult", "Single", "Sink", "StepResult", "whole_result"]


class StepResult(NamedTuple):
    """One env's step: ``obs`` is unbatched (as the env returned it)."""

    obs: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    env_id: int


class ResetResult(NamedTuple):
    """One env's reset: ``obs`` is unbatched."""

    obs: Any
    info: dict[str, Any]
    env_id: int


class Part:
    """Decoded rows of one reply. ``obs``: leaves with ``len(env_ids)`` rows; ``reward`` (float64),
    ``terminated``/``truncated`` (bool) of shape ``(k,)``; ``infos``: per-row dict or None
    (single-env replies) or ``binfo``: the rows' infos batched column-wise (batch replies);
    ``errors``: row -> error; ``values``: per-row call results."""

    __slots__ = ("binfo", "env_ids", "errors", "infos", "obs", "reward", "terminated", "truncated", "values")

    def __init__(
        self,
        env_ids: np.ndarray,
        obs: list[np.ndarray] | None = None,
        extras: list[np.ndarray] | None = None,
        infos: list[Any] | None = None,
        errors: dict[int, AioEnvError] | None = None,
        values: list[Any] | None = None,
        *,
        binfo: dict[str, Any] | None = None,
    ) -> None:
        n = env_ids.size
        self.env_ids = env_ids
        self.obs = obs
        if extras:
            self.reward, self.terminated, self.truncated = extras
        else:
            self.reward = np.zeros(n, dtype=np.float64)
            self.terminated = np.zeros(n, dtype=np.bool_)
            self.truncated = np.zeros(n, dtype=np.bool_)
        self.infos = infos
        self.binfo = binfo
        self.errors = errors or {}
        self.values = values

    def batched_info(self) -> dict[str, Any] | None:
        """The rows' infos batched column-wise (None when no row has an info)."""
        if self.binfo is not None:
            return self.binfo
        if self.infos and any(self.infos):
            return batch_infos(self.infos, self.env_ids.size)
        return None

    @classmethod
    def failed(cls, env_ids: np.ndarray, make_error: Callable[[int], AioEnvError]) -> Part:
        """A part whose every row failed with ``make_error(env_id)``."""
        return cls(env_ids, errors={i: make_error(int(e)) for i, e in enumerate(env_ids)})


class Sink(Protocol):
    """What a request's rows are delivered to: :class:`Gather`, :class:`Single`, :class:`RecvQueue`, or a
    server's relay of a client's request.

    ``deliver(part, positions)`` gets rows of the request as they are answered: ``part`` holds k rows,
    ``positions`` (k,) int64 says where they stand in the caller's call. ``fail(exc)`` fails whatever
    the sink still waits for (the pool closed, the request could not be sent). Every row of a request
    reaches its sink exactly once, as a row or as an error in ``part.errors``.
    """

    def deliver(self, part: Part, positions: np.ndarray, /) -> None:
        """Take ``part``'s rows, which stand at ``positions`` of the caller's call."""

    def fail(self, exc: BaseException, /) -> None:
        """Fail every row this sink still waits for with ``exc``."""


def _raise_first(errors: dict[int, AioEnvError], partial: Any) -> None:
    """Raise the error of the first failed row, carrying the other rows and every failure."""
    first = errors[min(errors)]
    first.partial = partial
    first.errors = {int(e.env_id) if e.env_id is not None else -1: e for e in errors.values()}
    raise first


def _own_rows(part: Part) -> bool:
    """Whether ``part``'s arrays may become a caller's batch as they are: writable, so not views of a message's
    frames (those are read-only) but copies made for this reply (the shared rows' :meth:`Slab.results`)."""
    if part.obs is None:
        return False
    for leaf in part.obs:  # a loop, not all() over a generator: this runs for every whole reply
        if not leaf.flags.writeable:
            return False
    return bool(part.reward.flags.writeable and part.terminated.flags.writeable and part.truncated.flags.writeable)


def whole_result(kind: str, part: Part, obs_space: Any, *, info_list: bool = False) -> tuple[Any, ...]:
    """The result of a ``step``/``reset`` call (``kind``) that ``part`` answers alone: every row of the call in its
    order, none failed, and arrays of the part's own (:func:`_own_rows`), which become the batch as they are.

    What :class:`Gather` assembles from such a part, without the gathering: ``(obs, reward (B,) float64,
    terminated (B,) bool, truncated (B,) bool, info)`` for a step, ``(obs, info)`` for a reset; ``info`` is
    batched with ``info["env_id"]`` ``(B,)`` int32, or with ``info_list`` each env's own dict (``{}``: none)."""
    info: Any
    if info_list:
        infos = part.infos
        info = [env_info or {} for env_info in infos] if infos else [{} for _ in range(part.env_ids.size)]
    elif part.binfo is None and not part.infos:  # no env had an info (the common case)
        info = {"env_id": part.env_ids.astype(np.int32)}
    else:
        binfo = part.batched_info()
        info = whole_info(binfo, part.env_ids.size) if binfo is not None else {}
        info["env_id"] = part.env_ids.astype(np.int32)
    obs = spaces.from_leaves(obs_space, part.obs or ())
    if kind == "reset":
        return obs, info
    return obs, part.reward, part.terminated, part.truncated, info


class _Finals(NamedTuple):
    """The rows of some shared rows whose step ended in a same_step pool (``rows``: indices among them, ``(e,)``),
    their final observations copied out of the slab's area of them (``obs``: ``(e, *shape)``)."""

    rows: np.ndarray
    obs: np.ndarray
    ended: np.ndarray  # (k,) bool: which of the k rows ended


def _final_rows(slab: Slab, where: slice | np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> _Finals | None:
    """The final observations of the shared rows ``where`` (k rows; ``terminated``, ``truncated``: their flags, (k,))
    whose step ended, when the slab holds them (a same_step pool's lane replies, :mod:`aioenv.transport.slab`);
    None when it has no area for them or no row ended. Read before the rows' envs are freed."""
    final = slab.final
    if final is None:
        return None
    ended = terminated | truncated
    rows = ended.nonzero()[0]
    if not rows.size:
        return None
    obs = final[where][rows] if type(where) is slice else final[where[rows]]  # (copies)
    return _Finals(rows, obs, ended)


def _final_columns(finals: _Finals) -> dict[str, Any]:
    """``final_obs`` (an object array of the rows' own observations, None where a row did not end) and
    ``final_info`` (``{}``: no ended episode had an info) with their masks, as gymnasium's ``_add_info`` makes
    them for these rows alone; also a batched info :func:`merge_infos` and :func:`concat_infos` take."""
    ended = finals.ended
    obs = np.full(ended.size, None, dtype=object)
    for j, row in enumerate(finals.rows.tolist()):
        obs[row] = finals.obs[j]
    return {"final_obs": obs, "_final_obs": ended, "final_info": {}, "_final_info": ended.copy()}


def _merged_infos(
    infos: list[tuple[dict[str, Any], np.ndarray]],
    finals: dict[str, Any] | None,
    num_rows: int,
    env_ids: np.ndarray | None = None,
) -> dict[str, Any]:
    """Batched infos from worker processes (each at its rows of ``num_rows``) merged, with the final observations'
    columns ``finals`` (every row) if any. A worker runs env code, so its infos are a peer's: ones that do not
    merge raise :class:`ProtocolError`, which fails the call they belong to (naming the envs, ``env_ids`` ``(B,)``
    being the batch's, where the envs' own infos are why)."""
    kept = infos if finals is None else [*infos, (finals, np.arange(num_rows))]
    try:
        return merge_infos(kept, num_rows)
    except Exception as exc:  # what no env's infos make: any error of the merge says so
        raise _unmerged(exc, env_ids) from exc


def _unmerged(exc: Exception, env_ids: np.ndarray | None) -> ProtocolError:
    """The error of a call whose workers' batched infos do not merge (``exc``: what the merge raised; ``env_ids``: the
    batch's envs, for an :class:`aioenv.wire.infos.UnmergedInfo` to say which gave what)."""
    if isinstance(exc, UnmergedInfo) and env_ids is not None:
        said = ", ".join(f"{kind} from envs {env_ids[at].tolist()}" for kind, at in exc.rows.items())
        return ProtocolError(
            f"the envs' infos do not batch: key {exc.key!r} is {said}; a key's value must be a dict for every env or "
            "for none (gymnasium's vector envs cannot batch them either)"
        )
    return ProtocolError(
        f"a worker's batched infos do not merge: {exc!r} (the envs' infos are ones gymnasium's vector envs cannot "
        "batch either, or a worker sent malformed ones)"
    )


def _joined_infos(infos: list[dict[str, Any] | None], sizes: list[int], env_ids: np.ndarray) -> dict[str, Any]:
    """Batched infos of consecutive runs of rows (``sizes[i]`` rows each; None: none) joined, as
    :func:`aioenv.wire.infos.concat_infos` joins them; ones that do not join (a worker's are a peer's) raise
    :class:`ProtocolError`, as :func:`_merged_infos` does (``env_ids`` ``(B,)``: the batch's envs)."""
    try:
        return concat_infos(infos, sizes)
    except Exception as exc:  # what no env's infos make: any error of the join says so
        raise _unmerged(exc, env_ids) from exc


def _with_finals(binfo: dict[str, Any] | None, finals: dict[str, Any] | None, num_rows: int) -> dict[str, Any] | None:
    """The batched info of ``num_rows`` rows (``binfo``: a worker's, or the info area's, as
    :func:`aioenv.wire.infos.batch_infos` makes them) with the final observations' columns ``finals`` of the same rows,
    still a batched info: the Python-scalar columns stay named, so that joined with other rows' infos later
    (:func:`aioenv.wire.infos.concat_infos`) a key's values are gymnasium's, whichever rows come first. The keys side
    by side (a worker whose ended envs' final observations are in the slab says nothing else of those envs: they
    share none); merged where they do."""
    if finals is None or not binfo:
        return binfo or finals
    if binfo.keys() & finals.keys():
        return _merged_infos([(binfo, np.arange(num_rows))], finals, num_rows)
    return {**binfo, **finals}


def _put_final_dicts(infos: list[dict[str, Any]], finals: _Finals, positions: np.ndarray | None) -> None:
    """Each ended row's own info dict (``info_list``), at its position among ``infos`` (``positions[row]``; None:
    the row itself): ``{"final_obs": its observation, "final_info": {}}``, as the worker would have sent it."""
    for j, row in enumerate(finals.rows.tolist()):
        at = row if positions is None else int(positions[row])
        infos[at] = {"final_obs": finals.obs[j], "final_info": {}}


class Gather:
    """Collects the parts of one batched call over ``env_ids`` (B rows, caller's order)."""

    def __init__(self, kind: str, env_ids: np.ndarray, obs_space: Any, *, info_list: bool = False) -> None:
        self.kind = kind
        self._info_list: list[dict[str, Any]] | None = [{} for _ in range(env_ids.size)] if info_list else None
        self.env_ids = env_ids
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._left = env_ids.size  # rows still to come (a reply may carry some rows of a request)
        self._obs_space = obs_space
        self._obs: list[np.ndarray] | None = None
        self._reward: np.ndarray | None = None
        self._terminated: np.ndarray | None = None
        self._truncated: np.ndarray | None = None
        self._infos: list[tuple[dict[str, Any], np.ndarray]] = []  # merged at the end (dtypes by row order)
        self._values: list[Any] = [None] * env_ids.size if kind == "call" else []  # (a call's results)
        self._errors: dict[int, AioEnvError] = {}
        # Rows in the pool's shared rows, copied once every row is in (see take_shared): (first env, positions).
        self._shared: list[tuple[int, np.ndarray]] | None = None
        self._slab: Slab | None = None
        self._release: Callable[[np.ndarray], None] | None = None
        self._base = 0  # the call's first env id (its envs' rows are base, base + 1, ... when it is one run)
        self._aligned = True  # every run so far stands at the positions of a call of one run of envs
        self._in_slab = 0  # rows of those runs
        # Runs whose infos lie in the slab's info area (see keep_area): (first env, count, positions or None), read
        # with the rows.
        self._areas: list[tuple[int, int, np.ndarray | None]] = []
        self._area: InfoArea | None = None
        self._area_rows = 0

    def deliver(self, part: Part, positions: np.ndarray) -> None:
        """Place one part's rows at ``positions``; resolves the future once every row arrived."""
        n = self.env_ids.size
        if part.obs is not None:
            if part.env_ids.size == n and _own_rows(part):
                # The whole call in one part: its positions are every row in order (see Scheduler.split),
                # and its arrays are fresh copies no one else holds, so they become the batch as they are.
                if not part.errors:  # (the common case, built at once)
                    self._left = 0
                    if not self.future.done():
                        self.future.set_result(
                            whole_result(self.kind, part, self._obs_space, info_list=self._info_list is not None)
                        )
                    return
                self._obs = part.obs
                self._reward, self._terminated, self._truncated = part.reward, part.terminated, part.truncated
            else:
                self._place(part, positions)
            if self._info_list is not None:  # each env's own dict (adapters that want SB3-style infos)
                for pos, env_info in zip(positions, part.infos or (), strict=False):
                    if env_info:
                        self._info_list[int(pos)] = env_info
            else:
                binfo = part.batched_info()
                if binfo is not None:
                    self._infos.append((binfo, positions))
        if part.values is not None:
            for pos, value in zip(positions, part.values, strict=True):
                self._values[int(pos)] = value
        for row, err in part.errors.items():
            self._errors[int(positions[row])] = err
        self._left -= part.env_ids.size
        if self._left == 0:
            self._finish()

    def take_shared(self, slab: Slab, first: int, positions: np.ndarray, release: Callable[[np.ndarray], None]) -> None:
        """A step's rows that lie in the pool's shared rows ``first .. first + k - 1`` (k = ``positions.size``), none
        of them failed and none with an info but a final observation in the slab (a lane step's reply,
        :mod:`aioenv.wire.lane`; see :func:`_final_rows`), standing at ``positions`` of the call. Their envs stay
        claimed, so nothing writes those rows until every row of the call is in: then each run is copied once,
        straight into the batch (the whole batch in one copy per array when the call's envs are one run, as a
        lock-step ``step()``'s are), and ``release(env_ids)`` frees their envs."""
        k = positions.size
        if self._shared is None:
            self._shared = []
            self._slab = slab
            self._release = release
            self._base = int(self.env_ids[0])
        # Aligned: the run stands at the positions of its env ids in a call of the envs base, base + 1, ...
        # (its positions are increasing and unique, so their ends say they are that range).
        p0 = first - self._base
        if self._aligned and (int(positions[0]) != p0 or int(positions[-1]) != p0 + k - 1):
            self._aligned = False
        self._shared.append((first, positions))
        self._in_slab += k
        self._left -= k
        if self._left == 0:
            self._finish()

    @property
    def batches_infos(self) -> bool:
        """Whether the call's infos come batched column-wise (gymnasium's way), not each env's own dict."""
        return self._info_list is None

    def keep_info(self, binfo: dict[str, Any], positions: np.ndarray) -> None:
        """The batched info of rows that stand at ``positions`` of the call and lie in the shared rows (a lane
        message answered with a RESULT whose rows are there, no row failed): merged with the others when the
        call's rows are taken (:meth:`take_every_shared`, or :meth:`take_shared` after a spill)."""
        self._infos.append((binfo, positions))

    def keep_area(self, area: InfoArea, first: int, count: int, positions: np.ndarray | None = None) -> None:
        """The infos of the rows ``first .. first + count - 1`` lie in the slab's info area ``area`` (a lane DONE that
        says so, :mod:`aioenv.transport.slab_infos`), the rows standing at ``positions`` of the call (None: at their
        env ids, a lane call's of every env): read when the call's rows are taken, before their envs are freed (in one
        read per key when every row of a lock-step call's is there, :meth:`take_every_shared`)."""
        self._area = area
        self._areas.append((first, count, positions))
        self._area_rows += count

    def _take_areas(self) -> None:
        """The infos :meth:`keep_area` left in the info area, read into the call's infos (each run's a batched info,
        merged with the others'; or, for a call of each env's own dict, each row's dict at its position)."""
        area, areas = self._area, self._areas
        if area is None or not areas:
            return
        self._areas = []
        self._area_rows = 0
        own = self._info_list
        if own is not None:
            self._own_dicts(area, areas, own)
            return
        for first, count, positions in areas:
            binfo = area.binfo(slice(first, first + count))
            if binfo:
                self._infos.append((binfo, np.arange(first, first + count) if positions is None else positions))

    @staticmethod
    def _own_dicts(area: InfoArea, areas: list[tuple[int, int, np.ndarray | None]], own: list[dict[str, Any]]) -> None:
        """Each row's own info dict of the runs ``areas`` (:meth:`keep_area`'s) read from ``area`` into ``own`` at
        the rows' positions: runs at their env ids (a lane call's of every env) in one read from the first to the last
        (the rows between, if any, read and dropped), others a read each."""
        if all(positions is None for _, _, positions in areas):
            lo = min(first for first, _, _ in areas)
            dicts = area.dicts(lo, max(first + count for first, count, _ in areas) - lo)
            for first, count, _ in areas:
                own[first : first + count] = dicts[first - lo : first - lo + count]
            return
        for first, count, positions in areas:
            at = range(first, first + count) if positions is None else positions.tolist()
            for pos, info in zip(at, area.dicts(first, count), strict=True):
                own[pos] = info

    def take_every_shared(self, slab: Slab, release: Callable[[np.ndarray], None]) -> None:
        """Every row of the call at once: a lock-step step of every env (the call's envs are ``0 .. B - 1``, in
        order), each worker's run answered with its rows in ``slab``, none failed and none with an info but a final
        observation in the slab or one kept (:meth:`keep_info`) (a lane call, :mod:`aioenv.wire.lane`; see
        :func:`_final_rows`). :meth:`take_shared` of each run, without the gathering: the batch is one copy per
        array of the block, then ``release(env_ids)`` frees the envs. Nothing else may have arrived."""
        assert self._left == self.env_ids.size, "a lane call's rows arrive all at once"
        assert self._shared is None, "a lane call's rows arrive all at once"
        n = self._left
        future = self.future
        if future.done():  # (its caller gave up: the rows are dropped, the envs free)
            self._left = 0
            release(self.env_ids)
            return
        every = slice(0, n)
        obs, extras = slab.results(every, True)
        assert extras is not None, "a step's results have extras"
        reward, terminated, truncated = extras
        finals = _final_rows(slab, every, terminated, truncated)  # (before the envs are freed)
        area = self._area
        # Every row's infos in the info area, nothing else: the batch's infos are one read per key.
        whole = (
            area.batch(every)
            if area is not None
            and self._area_rows == n
            and not self._infos
            and finals is None
            and self._info_list is None
            else None
        )
        if whole is None:
            self._take_areas()
        self._left = 0
        release(self.env_ids)
        info: Any
        if whole is not None:
            info = whole
            info["env_id"] = self.env_ids.astype(np.int32)
        elif self._info_list is not None:
            info = self._info_list
            if finals is not None:
                _put_final_dicts(info, finals, None)
        elif self._infos:
            try:
                info = _merged_infos(self._infos, None if finals is None else _final_columns(finals), n, self.env_ids)
            except ProtocolError as exc:
                future.set_exception(exc)
                return
            info["env_id"] = self.env_ids.astype(np.int32)
        else:
            info = {} if finals is None else _final_columns(finals)
            info["env_id"] = self.env_ids.astype(np.int32)
        future.set_result((spaces.from_leaves(self._obs_space, obs), reward, terminated, truncated, info))

    def _copy_shared(self) -> None:
        """Copy the rows :meth:`take_shared` left in the slab into the batch and free their envs."""
        runs, slab, release = self._shared, self._slab, self._release
        if runs is None or slab is None or release is None:
            return
        self._take_areas()  # (before the envs are freed)
        self._shared = None
        self._slab = self._release = None
        n = self.env_ids.size
        if self._obs is None and self._aligned and self._in_slab == n:
            # Every row, each run where its env ids stand: the call's envs are base .. base + n - 1, and the
            # batch is that block of the slab, one copy per array.
            block = slice(self._base, self._base + n)
            self._obs, extras = slab.results(block, True)
            assert extras is not None, "a step's results have extras"
            self._reward, self._terminated, self._truncated = extras
            self._add_finals(_final_rows(slab, block, self._terminated, self._truncated), np.arange(n))
            release(self.env_ids)
            return
        held = []
        for first, positions in runs:  # each run where its positions say (a call of a subset, or beside failures)
            part = _in_slab(slab, first, first + positions.size)
            self._place(part, positions)
            self._add_finals(
                _final_rows(slab, slice(first, first + positions.size), part.terminated, part.truncated), positions
            )
            held.append(part.env_ids)
        release(np.concatenate(held))

    def _add_finals(self, finals: _Finals | None, positions: np.ndarray) -> None:
        """The final observations of rows that stand at ``positions`` of the call, into its infos."""
        if finals is None:
            return
        if self._info_list is not None:
            _put_final_dicts(self._info_list, finals, positions)
        else:
            self._infos.append((_final_columns(finals), positions))

    def _place(self, part: Part, positions: np.ndarray) -> None:
        """Copy ``part``'s rows into the batch at ``positions``."""
        if self._obs is None:
            self._obs = spaces.empty_batch(self._obs_space, self.env_ids.size)
        reward, terminated, truncated = self._flags()
        assert part.obs is not None
        for out, leaf in zip(self._obs, part.obs, strict=True):
            out[positions] = leaf
        reward[positions] = part.reward
        terminated[positions] = part.terminated
        truncated[positions] = part.truncated

    def _flags(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The batch's reward ``(B,)`` float64, terminated and truncated ``(B,)`` bool, made (zeros) on first use:
        a reset has none, and a whole-call part brings its own."""
        if self._reward is None or self._terminated is None or self._truncated is None:
            n = self.env_ids.size
            self._reward = np.zeros(n, dtype=np.float64)
            self._terminated = np.zeros(n, dtype=np.bool_)
            self._truncated = np.zeros(n, dtype=np.bool_)
        return self._reward, self._terminated, self._truncated

    def _finish(self) -> None:
        if self._shared is not None:
            self._copy_shared()  # first: it also frees the envs whose rows it copies
        if self.future.done():
            return
        try:
            result = self._result()
        except AioEnvError as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)

    def _result(self) -> Any:
        if self.kind == "call":
            if self._errors:
                _raise_first(self._errors, None)
            return self._values
        n = self.env_ids.size
        obs_leaves = self._obs if self._obs is not None else spaces.empty_batch(self._obs_space, n)
        info: Any
        if self._info_list is not None:
            info = self._info_list
        else:
            info = _merged_infos(self._infos, None, n, self.env_ids) if self._infos else {}
            info["env_id"] = self.env_ids.astype(np.int32)
        full = (obs_leaves, *self._flags(), info)
        if self._errors:
            ok = np.ones(self.env_ids.size, dtype=np.bool_)
            ok[list(self._errors)] = False
            partial = self._shape(tuple(self._take(full, ok)))
            _raise_first(self._errors, partial)
        return self._shape(full)

    @staticmethod
    def _take(full: tuple[Any, ...], index: np.ndarray) -> list[Any]:
        leaves, rew, term, trunc, info = full
        kept = [info[i] for i in np.flatnonzero(index)] if isinstance(info, list) else take_info(info, index)
        return [spaces.take_rows(leaves, index), rew[index], term[index], trunc[index], kept]

    def _shape(self, full: tuple[Any, ...]) -> Any:
        obs = spaces.from_leaves(self._obs_space, full[0])
        if self.kind == "reset":
            return obs, full[4]
        return (obs, *full[1:])

    def fail(self, exc: BaseException) -> None:
        """Fail the whole call (shutdown)."""
        if self._shared is not None:
            self._copy_shared()  # frees the envs whose rows wait in the slab
        if not self.future.done():
            self.future.set_exception(exc)


class Single:
    """Resolves one env's future with a :class:`StepResult` or :class:`ResetResult`."""

    def __init__(self, kind: str, future: Any, obs_space: Any) -> None:
        self.kind = kind
        self.future = future
        self._read = spaces.row_reader(obs_space)

    def deliver(self, part: Part, _positions: np.ndarray | None = None) -> None:
        """Resolve the future from the part's only row."""
        if self.future.done():
            return
        if part.errors:
            self.future.set_exception(part.errors[0])
            return
        assert part.obs is not None
        obs = self._read([np.array(leaf[:1]) for leaf in part.obs], 0)
        info = dict(part.infos[0]) if part.infos and part.infos[0] else {}
        env_id = int(part.env_ids[0])
        if self.kind == "reset":
            self.future.set_result(ResetResult(obs, info, env_id))
        else:
            self.future.set_result(
                StepResult(obs, float(part.reward[0]), bool(part.terminated[0]), bool(part.truncated[0]), info, env_id)
            )

    def fail(self, exc: BaseException) -> None:
        """Fail the future (shutdown)."""
        if not self.future.done():
            self.future.set_exception(exc)


def _cut(leaves: list[np.ndarray], cut: slice | None) -> list[np.ndarray]:
    return leaves if cut is None else [leaf[cut] for leaf in leaves]


class _Segment(NamedTuple):
    part: Part
    start: int
    stop: int
    error: AioEnvError | None


def _in_slab(slab: Slab, first: int, end: int) -> Part:
    """The step rows of the envs ``first .. end - 1`` as they lie in ``slab``: a part of views, to be copied."""
    run = slice(first, end)
    extras = [slab.reward[run], slab.terminated[run], slab.truncated[run]]
    return Part(np.arange(first, end), [leaf[run] for leaf in slab.obs], extras)


class _Shared(list[int]):
    """The env ids of rows that lie in the pool's shared rows, in the order they finished, their envs held until
    taken (rows of lane replies queued one after another: see :meth:`RecvQueue.deliver_shared`)."""

    __slots__ = ()


class _SharedInfo(list[int]):
    """The env ids of one reply's rows that lie in the pool's shared rows, with their batched info (``binfo``, a
    row each): queued apart from its neighbours, and cut with its info when a take ends inside it."""

    __slots__ = ("binfo",)

    def __init__(self, env_ids: list[int], binfo: dict[str, Any]) -> None:
        super().__init__(env_ids)
        self.binfo = binfo

    def head(self, rows: int) -> _SharedInfo:
        """Its first ``rows`` rows, with their info, taken off it."""
        first = _SharedInfo(self[:rows], take_info(self.binfo, slice(0, rows)))
        self.binfo = take_info(self.binfo, slice(rows, None))
        del self[:rows]
        return first


class _SharedArea(list[int]):
    """The env ids of rows that lie in the pool's shared rows with their infos in its info area
    (:mod:`aioenv.transport.slab_infos`), in the order they finished: read with the rows when taken."""

    __slots__ = ()


class Unread(Protocol):
    """Where a :class:`RecvQueue` records which envs have results waiting (:class:`aioenv.core.scheduler.Scheduler`)."""

    def mark_unread(self, env_ids: np.ndarray) -> None:
        """Results of ``env_ids`` were queued."""

    def hold_unread(self, env_ids: list[int]) -> None:
        """Results of ``env_ids`` were queued in the shared rows, their envs held."""

    def mark_read(self, env_ids: np.ndarray) -> None:
        """Results of ``env_ids`` were taken."""

    def release_read(self, env_ids: np.ndarray) -> None:
        """The rows of the envs ``env_ids`` ``(k,)`` intp, held while they waited in the shared rows, were taken: the
        envs are read, and free."""


class RecvQueue:
    """Rows from ``send``/``send_reset`` in the order they finished, waiting for ``recv``.

    ``in_flight`` counts rows dispatched but not yet arrived; ``ready`` counts rows
    (and errors) waiting to be taken. ``unread`` (optional) is told which envs' results
    are queued and which were taken, so that no new request is accepted for an env whose
    result has not been read.
    """

    def __init__(self, obs_space: Any, unread: Unread | None = None) -> None:
        self._obs_space = obs_space
        self._unread = unread
        self._items: deque[_Segment | _Shared | _SharedInfo | _SharedArea] = deque()
        self._slab: Slab | None = None  # where the rows of queued shared rows lie (see deliver_shared)
        self.ready = 0
        self.in_flight = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # concurrent recv calls, oldest first

    def expect(self, rows: int) -> None:
        """Rows were dispatched and will arrive through :meth:`deliver`."""
        self.in_flight += rows

    def deliver(self, part: Part, _positions: np.ndarray | None = None) -> None:
        """Queue a part's rows, cutting it around failed rows (each error is a reply of its own)."""
        n = part.env_ids.size
        self.in_flight -= n
        start = 0
        if part.errors:
            for row in sorted(part.errors):
                if row > start:
                    self._items.append(_Segment(part, start, row, None))
                self._items.append(_Segment(part, row, row + 1, part.errors[row]))
                start = row + 1
        if start < n:
            self._items.append(_Segment(part, start, n, None))
        self.ready += n
        if self._unread is not None:
            self._unread.mark_unread(part.env_ids)
        self._wake()

    def deliver_shared(
        self, slab: Slab, env_ids: list[int], binfo: dict[str, Any] | None = None, area: bool = False
    ) -> None:
        """Queue the step rows of ``env_ids`` (in the order they finished), which lie in the pool's shared rows
        ``slab``, none failed and none with an info but a final observation in the slab (lane replies,
        :mod:`aioenv.wire.lane`, see :func:`_final_rows`; and a thread or async worker's rows with no info at all,
        ``Coordinator._queue_shared_rows``), or, with ``binfo``, one reply's rows and their batched info (a lane
        reply that was a RESULT with nothing but infos), or, with ``area``, rows whose infos lie in the slab's info area
        (lane DONEs that say so). Their envs stay claimed (busy), so nothing writes those
        rows, until :meth:`take` copies them into a batch, a whole batch in one gather per array, and frees them
        (``Unread.release_read``). Rows with no info join the shared rows queued just before them, if any: a
        batch's ids are then one array made from one list."""
        if self._unread is None:
            raise TypeError("rows held in the shared rows need the scheduler to hold and free their envs")
        self._slab = slab
        items = self._items
        if binfo is not None:
            items.append(_SharedInfo(env_ids, binfo))
        elif area:
            if items and type(items[-1]) is _SharedArea:
                items[-1] += env_ids
            else:
                items.append(_SharedArea(env_ids))
        elif items and type(items[-1]) is _Shared:
            items[-1] += env_ids
        else:
            items.append(_Shared(env_ids))
        rows = len(env_ids)
        self.in_flight -= rows
        self.ready += rows
        self._unread.hold_unread(env_ids)
        self._wake()

    def _wake(self) -> None:
        for need, fut in self._waiters:  # oldest first: its task resumes, and takes, first
            if (self.ready >= need or self.in_flight == 0) and not fut.done():
                fut.set_result(None)

    async def wait(self, need: int, timeout: float | None) -> None:
        """Wait until ``need`` rows are ready (or nothing more can come, or the timeout). Several calls may
        wait at once: each is woken when its own ``need`` is met, the oldest first; a caller whose rows
        another took meanwhile waits again (see ``Pool.recv``)."""
        if self.ready >= need or self.in_flight == 0:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (need, fut)
        self._waiters.append(waiter)
        try:
            if timeout is None:
                await fut
            else:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
        except TimeoutError:
            pass
        finally:
            self._waiters.remove(waiter)

    def fail(self, exc: BaseException) -> None:
        """Shutdown: rows in flight will never arrive."""
        self.in_flight = 0
        self.fail_waiter(exc)

    def fail_waiter(self, exc: BaseException) -> None:
        """Wake every waiting ``recv`` with ``exc`` (shutdown)."""
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(exc)

    def take(self, max_rows: int) -> tuple[Any, ...]:
        """Take up to ``max_rows`` rows as a batched step tuple (B <= max_rows rows).

        An error at the head with no rows before it is raised (and consumed); an error
        after some rows stays queued for the next call.
        """
        queued = self._items
        if len(queued) == 1 and max_rows > 0:  # a send()/recv() loop's rows, of one kind (:meth:`_take_shared`)
            head = queued[0]
            if type(head) is _Shared or type(head) is _SharedArea:
                return self._take_shared(head, max_rows)
        items: list[_Segment | _Shared | _SharedInfo | _SharedArea] = []  # in the order they finished
        segments: list[_Segment] = []
        shared: list[int] = []  # the env ids of every row taken from the shared rows
        infos: list[tuple[dict[str, Any], np.ndarray]] = []  # their batched infos, at their rows of the batch
        in_area: list[int] = []  # the env ids of rows whose infos are in the info area,
        area_at: list[int] = []  # and their rows of the batch
        taken = 0
        while queued and taken < max_rows:
            item = queued[0]
            room = max_rows - taken
            if type(item) is _Shared or type(item) is _SharedArea:
                piece: _Shared | _SharedInfo | _SharedArea = item
                if len(item) > room:
                    piece = type(item)(item[:room])
                    del item[:room]
                else:
                    queued.popleft()
                if type(piece) is _SharedArea:
                    in_area += piece
                    area_at += range(taken, taken + len(piece))
                shared += piece
                items.append(piece)
                taken += len(piece)
                continue
            if type(item) is _SharedInfo:
                head = item.head(room) if len(item) > room else queued.popleft()
                assert isinstance(head, _SharedInfo)
                infos.append((head.binfo, np.arange(taken, taken + len(head))))
                shared += head
                items.append(head)
                taken += len(head)
                continue
            assert isinstance(item, _Segment)
            seg = item
            if seg.error is not None:
                if taken:
                    break
                queued.popleft()
                self.ready -= 1
                if self._unread is not None:
                    self._unread.mark_read(seg.part.env_ids[seg.start : seg.stop])
                raise seg.error
            if seg.stop - seg.start > room:
                queued[0] = _Segment(seg.part, seg.start + room, seg.stop, None)
                seg = _Segment(seg.part, seg.start, seg.start + room, None)
            else:
                queued.popleft()
            items.append(seg)
            segments.append(seg)
            taken += seg.stop - seg.start
        self.ready -= taken
        held = np.array(shared, np.intp) if shared else None
        try:
            whole: dict[str, Any] | None = None
            if in_area:
                area = self._info_area()
                if len(in_area) == taken and not segments:  # every row's infos in the area: one read per key
                    whole = area.batch(held)  # type: ignore[arg-type]
                elif not segments:
                    infos.append((area.binfo(np.array(in_area, np.intp)), np.array(area_at, np.intp)))
            if held is None:
                batch = self._assemble(segments, taken)
            elif not segments:
                batch = self._gather(held, infos, whole)
            else:  # both kinds (rare: a reply with errors among lane replies): the shared rows copied, all joined
                batch = self._assemble([self._as_segment(item) for item in items], taken)
        except BaseException:  # (infos that do not merge: the rows are lost, their envs free)
            if self._unread is not None:
                for seg in segments:
                    self._unread.mark_read(seg.part.env_ids[seg.start : seg.stop])
                if held is not None:
                    self._unread.release_read(held)
            raise
        if self._unread is not None and taken:
            if segments:
                self._unread.mark_read(batch[4]["env_id"])
            if held is not None:
                self._unread.release_read(held)  # (after the copies above: the rows are the batch's now)
        return batch

    def _take_shared(self, item: _Shared | _SharedArea, max_rows: int) -> tuple[Any, ...]:
        """:meth:`take` where the queue holds one list of rows in the shared rows, ``item`` (``max_rows`` > 0), with
        no infos or with every row's in the info area: its first ``max_rows`` rows, copied out in one gather per
        array (and one read of the area), their envs then freed; what the general way does for it, without its lists
        of items, segments and infos."""
        unread = self._unread
        assert unread is not None, "rows in the shared rows are queued with the scheduler that holds their envs"
        if len(item) > max_rows:
            held = np.array(item[:max_rows], np.intp)
            del item[:max_rows]
        else:
            held = np.array(item, np.intp)
            self._items.popleft()
        self.ready -= held.size
        try:
            batch = self._gather(held, None, self._info_area().batch(held) if type(item) is _SharedArea else None)
        except BaseException:  # (as take: the rows are lost, their envs free)
            unread.release_read(held)
            raise
        unread.release_read(held)  # (after the copies: the rows are the batch's now)
        return batch

    def _copy_shared(self, ids: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray], dict[str, Any] | None]:
        """Copies of the step rows of ``ids`` ``(k,)`` intp out of the shared rows, one per array: the observation
        leaves, ``[reward, terminated, truncated]``, and the ended rows' final observations as a batched info
        (None: none)."""
        slab = self._slab
        assert slab is not None, "shared rows are queued with their slab"
        leaves, extras = slab.results(ids, True)
        assert extras is not None, "a step's results have extras"
        finals = _final_rows(slab, ids, extras[1], extras[2])
        return leaves, extras, None if finals is None else _final_columns(finals)

    def _info_area(self) -> InfoArea:
        """The info area of the shared rows queued with their infos in it (see :meth:`deliver_shared`)."""
        area = self._slab.info if self._slab is not None else None
        assert area is not None, "rows queued with their infos in the info area"
        return area

    def _gather(
        self,
        ids: np.ndarray,
        infos: list[tuple[dict[str, Any], np.ndarray]] | None = None,
        whole: dict[str, Any] | None = None,
    ) -> tuple[Any, ...]:
        """A batch of the rows of ``ids`` ``(B,)`` intp, all in the shared rows; ``infos``: batched infos of some of
        them, each at its rows of the batch; ``whole``: the batch's infos, read from the info area (then ``infos`` is
        empty)."""
        leaves, (reward, terminated, truncated), info = self._copy_shared(ids)
        if whole is not None:
            info = whole if info is None else _merged_infos([(whole, np.arange(ids.size))], info, ids.size, ids)
        elif infos:
            info = _merged_infos(infos, info, ids.size, ids)
        info = {} if info is None else info
        info["env_id"] = ids.astype(np.int32)
        return spaces.from_leaves(self._obs_space, leaves), reward, terminated, truncated, info

    def _as_segment(self, item: _Segment | _Shared | _SharedInfo | _SharedArea) -> _Segment:
        """Rows in the shared rows as a segment of their copies (joined by :meth:`_assemble`'s concatenation)."""
        if isinstance(item, _Segment):
            return item
        ids = np.array(item, np.intp)
        leaves, extras, binfo = self._copy_shared(ids)
        if type(item) is _SharedInfo:
            binfo = _with_finals(item.binfo, binfo, ids.size)
        elif type(item) is _SharedArea:
            binfo = _with_finals(self._info_area().binfo(ids) or None, binfo, ids.size)
        return _Segment(Part(ids, leaves, extras, binfo=binfo), 0, ids.size, None)

    def _assemble(self, segments: list[_Segment], n: int) -> tuple[Any, ...]:
        if not segments:
            leaves = spaces.empty_batch(self._obs_space, 0)
            empty_f, empty_b = np.zeros(0, np.float64), np.zeros(0, np.bool_)
            info: dict[str, Any] = {"env_id": np.zeros(0, np.int32)}
            return spaces.from_leaves(self._obs_space, leaves), empty_f, empty_b, empty_b.copy(), info
        if len(segments) == 1 and segments[0].stop - segments[0].start == segments[0].part.env_ids.size:
            part = segments[0].part
            if _own_rows(part):  # one whole reply, taken off the queue, of arrays no one else holds: as it is
                return whole_result("step", part, self._obs_space)
        # A segment that is a whole part (rows usually arrive a reply at a time) is used as it is, not sliced;
        # concatenating copies, so the batch never shares memory with a reply still queued.
        cuts = [None if s.start == 0 and s.stop == s.part.env_ids.size else slice(s.start, s.stop) for s in segments]
        columns = [
            _cut([*(s.part.obs or []), s.part.reward, s.part.terminated, s.part.truncated, s.part.env_ids], c)
            for s, c in zip(segments, cuts, strict=True)
        ]
        *leaves, rew, term, trunc, ids = [np.concatenate(column) for column in zip(*columns, strict=True)]
        ids = ids.astype(np.int32)
        infos: list[dict[str, Any] | None] = []
        for s, c in zip(segments, cuts, strict=True):
            binfo = s.part.batched_info()
            infos.append(binfo if binfo is None or c is None else take_info(binfo, c))
        info = _joined_infos(infos, [s.stop - s.start for s in segments], ids) if any(infos) else {}
        info["env_id"] = ids
        return spaces.from_leaves(self._obs_space, leaves), rew, term, trunc, info
