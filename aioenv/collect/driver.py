"""One async producer, three ways to consume it: ``async for``, ``for`` (over a SyncPool), and in the background.

A :class:`Driver` subclass writes its collection once, as an async generator (:meth:`Driver._produce`) that
runs on the pool's event loop. Then:

- ``async for item in driver`` on an :class:`aioenv.Pool` pulls items in the caller's loop, which is the
  pool's;
- ``for item in driver`` on an :class:`aioenv.SyncPool` runs each pull on the SyncPool's loop thread (one
  hop per item, none per env step) and blocks until it is done; ``async for`` over a SyncPool also works,
  from any other loop. Where the SyncPool runs its calls in the caller's thread and the subclass says a pull
  awaits nothing but the pool's calls (:meth:`Driver._steps_here`: a lock-step collector whose policy is not
  async), each pull runs in the caller's thread instead and waits for every step as ``SyncPool.step`` does,
  without running the event loop (the first pull runs it, so the generator is the loop's);
- with ``background=True`` a task on the pool's loop runs ahead of the consumer, at most ``queue_size``
  items ahead: it takes a free slot before it starts each item, so at most ``queue_size`` items exist at
  once and the envs stop stepping while every slot is full (backpressure, bounded memory).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncGenerator, Coroutine
from typing import Any, Generic, Self, TypeVar

from aioenv.errors import UsageError
from aioenv.pool import Pool
from aioenv.sync import SyncPool

__all__ = ["Driver"]

T = TypeVar("T")
R = TypeVar("R")

_END = object()


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Driver(Generic[T]):
    """Iteration, background collection and closing around :meth:`_produce` (see the module).

    Attributes:
        pool: the :class:`aioenv.Pool` collected from (a SyncPool's underlying pool).
        closed: True once :meth:`aclose`/:meth:`close` ran.
    """

    def __init__(self, pool: Pool | SyncPool, *, background: bool, queue_size: int) -> None:
        if isinstance(pool, SyncPool):
            self._sync: SyncPool | None = pool
            self.pool = pool.pool
        elif isinstance(pool, Pool):
            self._sync = None
            self.pool = pool
        else:
            raise UsageError(f"a collector needs an aioenv.Pool or aioenv.SyncPool, got {type(pool).__name__}")
        self.background = background
        self.queue_size = queue_size
        self.closed = False
        self._lock = threading.Lock()
        self._gen: AsyncGenerator[T, None] | None = None
        self._queue: asyncio.Queue[Any] | None = None
        self._slots: asyncio.Semaphore | None = None
        self._task: asyncio.Future[None] | None = None

    def _produce(self) -> AsyncGenerator[T, None]:
        """The items, produced on the pool's loop (subclasses)."""
        raise NotImplementedError

    # ------------------------------------------------------------ on the pool's loop

    def _start_on_loop(self) -> None:
        if self._task is None:
            self._queue = asyncio.Queue()
            self._slots = asyncio.Semaphore(self.queue_size)
            self._task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        assert self._queue is not None
        assert self._slots is not None
        gen = self._produce()
        try:
            while True:
                await self._slots.acquire()  # a free slot before the next item is even started
                try:
                    item = await gen.__anext__()
                except StopAsyncIteration:
                    self._queue.put_nowait(_END)
                    return
                self._queue.put_nowait(item)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            self._queue.put_nowait(_Failure(exc))
        finally:
            await gen.aclose()

    async def _next_on_loop(self) -> T:
        if self.closed:
            raise StopAsyncIteration
        if not self.background:
            if self._gen is None:
                self._gen = self._produce()
            return await self._gen.__anext__()
        self._start_on_loop()
        assert self._queue is not None
        assert self._slots is not None
        item = await self._queue.get()
        if item is _END or isinstance(item, _Failure):
            self._queue.put_nowait(item)  # every later call ends the same way
            if isinstance(item, _Failure):
                raise item.exc
            raise StopAsyncIteration
        self._slots.release()
        result: T = item
        return result

    async def _close_on_loop(self) -> None:
        self.closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        gen, self._gen = self._gen, None
        if gen is not None:
            await gen.aclose()

    # ------------------------------------------------------------ from the caller

    def _hop(self, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
        assert self._sync is not None
        return asyncio.run_coroutine_threadsafe(coro, self._sync.loop)

    async def _run(self, coro: Coroutine[Any, Any, R]) -> R:
        if self._sync is None:
            return await coro
        return await asyncio.wrap_future(self._hop(coro))

    def _block(self, coro: Coroutine[Any, Any, R], what: str) -> R:
        sync = self._sync
        if sync is None:
            coro.close()
            raise UsageError(f"{what} blocks: it needs an aioenv.SyncPool; over an aioenv.Pool use the async form")
        if self.background or not self._steps_here():
            return self._hop(coro).result()
        if self._gen is None:  # the first pull runs the loop here: the generator is the loop's (its finalizer)
            return sync.run_coroutine(coro).result()
        return sync._run_stepped(coro).result()

    def _steps_here(self) -> bool:
        """Whether a pull (``for``, without ``background``) may run in the caller's thread, each of its waits for the
        pool's calls done as the SyncPool's own calls wait (:meth:`aioenv.SyncPool._run_stepped`): its coroutine
        awaits nothing but the pool's calls and needs no current task. False here; subclasses say when."""
        return False

    def start(self) -> None:
        """Begin collecting in the background now rather than at the first pull (``background=True`` only).

        Over an :class:`aioenv.Pool`, call it from a coroutine on the pool's loop."""
        if not self.background:
            raise UsageError("start() is for background collection: pass background=True")
        if self._sync is None:
            self._start_on_loop()
        else:

            async def begin() -> None:
                self._start_on_loop()

            self._hop(begin()).result()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        """The next item (``async for``); StopAsyncIteration after the last."""
        return await self._run(self._next_on_loop())

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> T:
        """The next item (``for``, over a SyncPool), blocking; StopIteration after the last."""
        try:
            return self._block(self._next_on_loop(), "for-iteration")
        except StopAsyncIteration:
            raise StopIteration from None

    async def aclose(self) -> None:
        """Stop collecting: cancel the background task and any policy call, wait for (and drop) the steps
        still in flight, so the pool is free for other calls. Idempotent; the pool stays open."""
        await self._run(self._close_on_loop())

    def close(self) -> None:
        """:meth:`aclose` for blocking code (a SyncPool)."""
        self._block(self._close_on_loop(), "close()")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
