"""``workers.threads``: env threads and the handoff of their finished rows to the worker's loop.

Real threads and a real event loop; no env. What is shown: every row put reaches the loop's handler exactly
once and in the order it was put, rows put before the loop runs arrive in one call (one wake-up per burst),
a thread's calls run in order on that one thread, and nothing raises once the loop is gone.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from workers.threads import EnvThread, Finished

pytestmark = pytest.mark.timeout(60)


async def test_rows_put_before_the_loop_runs_arrive_in_one_call() -> None:
    calls: list[list[int]] = []
    finished: Finished[int] = Finished(asyncio.get_running_loop(), calls.append)
    for i in range(5):
        finished.put(i)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert calls == [[0, 1, 2, 3, 4]]
    finished.put(5)  # a new burst wakes the loop again
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert calls == [[0, 1, 2, 3, 4], [5]]


async def test_rows_from_many_threads_arrive_once_each_in_order() -> None:
    loop = asyncio.get_running_loop()
    got: list[tuple[int, int]] = []
    finished: Finished[tuple[int, int]] = Finished(loop, got.extend)
    threads, per_thread = 8, 500
    start = threading.Barrier(threads)

    def put_many(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            finished.put((t, i))

    workers = [threading.Thread(target=put_many, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    while len(got) < threads * per_thread:
        await asyncio.sleep(0.001)
    for w in workers:
        w.join()
    await asyncio.sleep(0.01)
    assert len(got) == threads * per_thread  # no row twice
    for t in range(threads):
        assert [i for who, i in got if who == t] == list(range(per_thread))  # each thread's rows in order


async def test_env_thread_runs_calls_in_order_on_one_thread_and_reports_failures() -> None:
    loop = asyncio.get_running_loop()
    thread = EnvThread("aioenv-test-env", loop)
    seen: list[str] = []
    reports: list[tuple[bool, object]] = []
    done = asyncio.Event()

    def report(ok: bool, value: object) -> None:
        reports.append((ok, value))
        if len(reports) == 2:
            loop.call_soon_threadsafe(done.set)

    def boom() -> None:
        raise ValueError("step failed")

    thread.submit(lambda: seen.append(threading.current_thread().name) or 1, report)
    thread.submit(boom, report)
    made = await thread.run(lambda: threading.current_thread().name)
    await done.wait()
    thread.stop()
    assert made == "aioenv-test-env"
    assert seen == ["aioenv-test-env"]
    assert reports[0] == (True, 1)
    assert reports[1][0] is False
    assert isinstance(reports[1][1], ValueError)


async def test_env_thread_run_raises_the_call_s_exception_in_the_loop() -> None:
    thread = EnvThread("aioenv-test-raise", asyncio.get_running_loop())
    try:
        with pytest.raises(KeyError, match="missing"):
            await thread.run(lambda: {}["missing"])
    finally:
        thread.stop()


def test_put_after_the_loop_closed_does_not_raise() -> None:
    loop = asyncio.new_event_loop()
    calls: list[list[int]] = []
    finished: Finished[int] = Finished(loop, calls.append)
    loop.close()
    finished.put(1)  # a thread finishing while the worker exits: dropped, nobody waits for it
    assert calls == []
