"""Infos in the shared rows (:mod:`aioenv.transport.slab_infos`): real inline worker processes whose envs return
numeric infos answer their lane steps with a DONE that says the infos are in the slab's info area, and the batches
are still exactly gymnasium's, whatever else the envs return on some steps (keys the area lacks, a value of another
type, fewer keys, none), in lock-step calls and through ``send``/``recv``; a worker re-made after the area was added
maps it too; a worker that says its infos are in an area the pool does not have is replaced."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import struct
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aioenv
import aioenv.core.coordinator as coordinator_module
import aioenv.transport.pipe as pipe_module
from aioenv.errors import EnvRemade, ProtocolError, WorkerCrashed
from aioenv.wire import lane
from aioenv.wire.protocol import Key, Op, encode
from tests.envs.columns import ColumnsEnv
from tests.support.compare import assert_same
from tests.support.procs import HANG, wait_new_worker, worker_pid
from tests.support.records import Records, record_reads

COLUMNS = "tests.envs.columns:make_columns"
#: Mostly every key (the area's steps), now and then another kind of info (see tests.envs.columns).
KINDS = [0] * 10 + [1, 2, 3, 4, 5, 6]


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Records:
    """The records the pools take from their done pipes (``plain`` DONEs, DONEs with ``infos`` in the area)."""
    return record_reads(monkeypatch)


class _Batcher:
    """gymnasium's own ``VectorEnv._add_info`` over ``num_envs`` rows: the batch a vector env makes of infos."""

    _add_info = gym.vector.VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def gymnasium_batch(infos: list[dict[str, Any]]) -> dict[str, Any]:
    batcher = _Batcher(len(infos))
    out: dict[str, Any] = {}
    for row, info in enumerate(infos):
        out = batcher._add_info(out, info, row)  # type: ignore[arg-type]
    return out


@pytest.mark.parametrize(("workers", "mode"), [(2, "next_step"), (3, "next_step"), (3, "same_step")])
async def test_a_lock_step_pool_takes_numeric_infos_from_the_shared_rows_and_gives_gymnasiums_batches(
    workers: int, mode: str, taken: Records
) -> None:
    # same_step: a step whose envs ended says their final observations and infos, which go in RESULTs as before;
    # the steps between take their infos from the area
    n = 6
    rng = np.random.default_rng(workers)
    ref = gym.vector.SyncVectorEnv([ColumnsEnv] * n, autoreset_mode=gym.vector.AutoresetMode[mode.upper()])
    async with aioenv.Pool(COLUMNS, n, num_workers=workers, executor="inline", autoreset_mode=mode) as pool:
        got = await asyncio.wait_for(pool.reset(seed=0), HANG)
        want = ref.reset(seed=0)
        assert_same(got[0], want[0])
        for t in range(60):
            actions = rng.choice(KINDS, n) if t >= 2 else np.zeros(n, np.int64)
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            assert_same(got[:4], want[:4], f"step {t} of {actions.tolist()}")
            assert got[4].pop("env_id").tolist() == list(range(n))
            assert_same(got[4], want[4], f"infos of step {t} of {actions.tolist()}")
            area = pool._runner.slab.info  # type: ignore[union-attr]
            for key, column in area.columns.items() if area is not None else ():
                for array in (got[4].get(key), got[4].get(f"_{key}")):  # the caller's own, not views of the area
                    assert array is None or not np.shares_memory(array, column.values), key
                    assert array is None or not np.shares_memory(array, column.mask), key
        coord: Any = pool._runner
        assert coord.slab.info is not None
        assert list(coord.slab.info.columns) == ["x", "n", "flag", "x32", "z", "vec"]
    ref.close()
    # the first step's infos came in RESULTs and made the area; most steps after it said DONE with their infos
    assert len(taken.infos) > (58 if mode == "next_step" else 30) * workers // 2


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
async def test_recv_takes_each_rows_infos_from_the_shared_rows_cut_anywhere(mode: str, taken: Records) -> None:
    n, batch = 6, 4
    rng = np.random.default_rng(7)
    envs = [ColumnsEnv() for _ in range(n)]
    ended = [False] * n
    for i, env in enumerate(envs):
        env.reset(seed=i)

    def expected(env_id: int, action: int) -> tuple[float, dict[str, Any]]:
        env = envs[env_id]
        if ended[env_id]:  # next_step: the step after an end resets the env
            ended[env_id] = False
            return 0.0, env.reset()[1]
        obs, reward, terminated, truncated, info = env.step(action)
        if mode == "same_step" and (terminated or truncated):  # reset within the step, as gymnasium's vector envs do
            _, reset_info = env.reset()
            return reward, {**reset_info, "final_obs": obs, "final_info": info}
        ended[env_id] = terminated or truncated
        return reward, info

    async with aioenv.Pool(COLUMNS, n, num_workers=3, executor="inline", batch_size=batch, autoreset_mode=mode) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        sent: dict[int, int] = {}

        def send(ids: list[int], first: bool = False) -> None:
            actions = np.zeros(len(ids), np.int64) if first else rng.choice(KINDS, len(ids))
            sent.update(zip(ids, actions.tolist(), strict=True))
            pool.send(actions, ids)

        send(list(range(n)), first=True)
        for t in range(50):
            _, reward, _, _, info = await asyncio.wait_for(pool.recv(), HANG)
            ids = info.pop("env_id").tolist()
            assert 1 <= len(ids) <= batch
            rows = [expected(env_id, sent.pop(env_id)) for env_id in ids]
            assert reward.tolist() == [r for r, _ in rows]
            assert_same(info, gymnasium_batch([i for _, i in rows]), f"recv {t} of envs {ids}")
            send(ids)
        rest = await asyncio.wait_for(pool.recv(min_results=len(sent), max_results=n, timeout=HANG), HANG)
        assert sorted(rest[4]["env_id"].tolist()) == sorted(sent)
    assert taken.infos


async def test_a_worker_made_again_after_the_area_was_added_maps_it_and_writes_there(taken: Records) -> None:
    n = 4
    async with aioenv.Pool(COLUMNS, n, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        actions = np.zeros(n, np.int64)
        for _ in range(3):
            await asyncio.wait_for(pool.step(actions), HANG)
        coord: Any = pool._runner
        assert coord.slab.info is not None
        old = worker_pid(pool, 1)
        os.kill(old, signal.SIGKILL)
        await wait_new_worker(pool, 1, old)
        with pytest.raises(EnvRemade):
            await asyncio.wait_for(pool.step(actions), HANG)
        await asyncio.wait_for(pool.reset(env_ids=[2, 3], seed=[2, 3]), HANG)
        taken.infos.clear()
        ref = [ColumnsEnv() for _ in range(n)]
        for i in (2, 3):
            ref[i].reset(seed=i)
        for _ in range(4):
            _, _, _, _, info = await asyncio.wait_for(pool.step(actions[2:], env_ids=[2, 3]), HANG)
            want = [ref[i].step(0)[4] for i in (2, 3)]
            info.pop("env_id")
            assert_same(info, gymnasium_batch(want))
        assert {slot for slot, _ in taken.infos} == {1}  # the new process writes its infos to the area


async def test_a_worker_that_says_its_infos_are_in_an_area_the_pool_lacks_is_replaced() -> None:
    async with aioenv.Pool("tests.envs.faulty:PipeVandalEnv", 4, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(), HANG)
        await asyncio.wait_for(pool.step(np.zeros(4, np.int64)), HANG)
        coord: Any = pool._runner
        assert coord.slab is not None
        assert coord.slab.info is None  # (no infos so far: no area)
        old = worker_pid(pool, 1)
        with pytest.raises(WorkerCrashed) as caught:
            await asyncio.wait_for(pool.step(np.array([0, 0, 7, 0])), HANG)
        assert sorted(caught.value.errors) == [2, 3]
        assert "its infos in the shared rows, where this pool has no info area" in str(caught.value)
        await wait_new_worker(pool, 1, old)
        assert coord.slab.info is None


async def test_a_done_with_infos_for_a_step_that_did_not_ask_fails_that_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request of one env (``step_env``: a future of its own, no batch to read an info area into) answered with
    a DONE that says its infos are in the area fails with a protocol error naming the worker."""
    async with aioenv.Pool(COLUMNS, 4, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        await asyncio.wait_for(pool.step(np.zeros(4, np.int64)), HANG)
        coord: Any = pool._runner
        assert coord.slab.info is not None
        sent: list[bytes] = []

        def keep(data: bytes) -> bool:  # the step goes nowhere: this test answers it
            sent.append(bytes(data))
            return True

        monkeypatch.setattr(coord.slots[0].proc, "send_framed", keep)
        step = asyncio.ensure_future(pool.step_env(0, 0))
        async with asyncio.timeout(HANG):
            while not sent:
                await asyncio.sleep(0.01)
        monkeypatch.undo()
        req_id = lane.read_step(sent[0][12:])[0]
        done = lane.done(req_id, infos=True)
        assert coord._on_quick(coord.slots[0].name.encode(), memoryview(struct.pack("<IQ", 1, len(done)) + done))
        with pytest.raises(aioenv.errors.ProtocolError, match="infos in the shared rows unasked"):
            await asyncio.wait_for(step, HANG)


async def test_a_worker_without_the_area_answers_in_results_and_one_that_cannot_map_it_is_logged(
    taken: Records, caplog: pytest.LogCaptureFixture
) -> None:
    n = 4
    ref = gym.vector.SyncVectorEnv([ColumnsEnv] * n)
    async with aioenv.Pool(COLUMNS, n, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        ref.reset(seed=0)
        actions = np.zeros(n, np.int64)
        for _ in range(2):
            await asyncio.wait_for(pool.step(actions), HANG)
            ref.step(actions)
        coord: Any = pool._runner
        slot = coord.slots[1]
        without = {key: value for key, value in coord.slab.layout.items() if key != "info"}
        # worker 1 maps the rows again without the area (as a worker that could not map it keeps them)
        coord._send(slot, encode(Op.SLAB, coord._with_done_pipe(slot, {Key.ID: -1, Key.SLAB: without})))
        taken.infos.clear()
        for _ in range(5):
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            got[4].pop("env_id")
            assert_same(got[4], want[4])
        assert {slot for slot, _ in taken.infos} == {0}  # worker 1's infos came in its RESULTs
        bad = {**coord.slab.layout, "info": {**coord.slab.layout["info"], "size": 1 << 40}}
        with caplog.at_level(logging.WARNING, logger="aioenv.coordinator"):
            coord._send(slot, encode(Op.SLAB, coord._with_done_pipe(slot, {Key.ID: -1, Key.SLAB: bad})))
            got = await asyncio.wait_for(pool.step(actions), HANG)
        assert_same({k: v for k, v in got[4].items() if k != "env_id"}, ref.step(actions)[4])
        assert f"worker {slot.name} did not map the infos' shared rows" in caplog.text
        assert "does not fit the slab file" in caplog.text
    ref.close()


async def _held_step(pool: aioenv.Pool, monkeypatch: pytest.MonkeyPatch) -> tuple[asyncio.Future[Any], dict[int, int]]:
    """A lock-step ``step()`` of a pool of two inline workers whose lane messages go nowhere, for the test to answer
    them itself: the step's future, and the id of the message to each worker slot."""
    coord: Any = pool._runner
    sent: dict[int, bytes] = {}
    slot_of = {coord.slots[index].proc.pipe.fileno(): index for index in (0, 1)}

    def keep(fds: list[int], datas: list[bytes]) -> list[tuple[int, int]]:
        for fd, data in zip(fds, datas, strict=True):
            sent[slot_of[fd]] = bytes(data)
        return []

    monkeypatch.setattr(pipe_module, "send_each", keep)  # (a lock-step call writes its workers' pipes at once)
    step = asyncio.ensure_future(pool.step(np.zeros(4, np.int64)))
    async with asyncio.timeout(HANG):
        while len(sent) < 2:
            await asyncio.sleep(0.01)
    monkeypatch.undo()
    return step, {index: lane.read_step(data[12:])[0] for index, data in sent.items()}


async def test_a_done_with_infos_said_twice_keeps_its_rows_infos_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that says its DONE with infos twice in one read of the done pipe does not make its rows count twice:
    the other worker's rows, answered by a DONE without infos, come back with no infos, not with what an earlier step
    left in their rows of the area."""
    async with aioenv.Pool(COLUMNS, 4, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        for _ in range(2):
            await asyncio.wait_for(pool.step(np.zeros(4, np.int64)), HANG)  # the area's rows all hold infos now
        coord: Any = pool._runner
        step, ids = await _held_step(pool, monkeypatch)
        coord._take_lane_replies([(1, ids[1]), (1, ids[1])], area=True)
        coord._take_lane_replies([(0, ids[0])])
        *_, info = await asyncio.wait_for(step, HANG)
        assert info["_x"].tolist() == [False, False, True, True]
        assert info["x"][:2].tolist() == [0.0, 0.0]


async def test_a_call_whose_other_worker_dies_keeps_the_infos_its_answered_worker_left_in_the_area(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lock-step call whose message to one worker was answered with its infos in the area, and whose other worker
    then died before it answered: the rows of the answered message come back in the error's partial result with their
    infos (read from the area when the call became requests), the dead worker's rows failed."""
    async with aioenv.Pool(COLUMNS, 4, num_workers=2, executor="inline", seed=10) as pool:
        await asyncio.wait_for(pool.reset(), HANG)
        for _ in range(2):
            await asyncio.wait_for(pool.step(np.zeros(4, np.int64)), HANG)  # the area's rows all hold infos now
        coord: Any = pool._runner
        assert coord.slab.info is not None
        step, ids = await _held_step(pool, monkeypatch)
        expected = coord.slab.info.batch(slice(2, 4))  # what worker 1's envs left in the area
        coord._take_lane_replies([(1, ids[1])], area=True)
        assert not step.done()
        os.kill(worker_pid(pool, 0), signal.SIGKILL)
        with pytest.raises(WorkerCrashed) as caught:
            await asyncio.wait_for(step, HANG)
        assert sorted(caught.value.errors) == [0, 1]
        *_, info = caught.value.partial  # the rows that did not fail
        assert info["env_id"].tolist() == [2, 3]
        assert info["_x"].tolist() == [True, True]
        assert info["x"].tolist() == expected["x"].tolist()


async def test_an_area_is_planned_from_a_later_reply_when_the_first_ones_do_not_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Infos that are no numeric columns (a string) make no area, and the pool looks again at the next replies:
    an env whose first steps said something else still gets one; one whose infos never fit stops being looked at."""
    looked: list[int] = []
    plan = coordinator_module.plan_info_area

    def counting(*args: Any) -> Any:
        looked.append(1)
        return plan(*args)

    monkeypatch.setattr(coordinator_module, "plan_info_area", counting)
    n = 4
    ref = gym.vector.SyncVectorEnv([ColumnsEnv] * n)
    async with aioenv.Pool(COLUMNS, n, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        ref.reset(seed=0)
        coord: Any = pool._runner
        for t in range(6):
            actions = np.full(n, 3 if t < 2 else 0)  # a string among the infos, then numbers only
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            got[4].pop("env_id")
            assert_same(got[4], want[4])
            assert (coord.slab.info is None) == (t < 2)
    ref.close()
    assert len(looked) == 5  # two steps of two workers' strings, then the first reply of numbers
    looked.clear()
    async with aioenv.Pool(COLUMNS, n, num_workers=2, executor="inline") as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        for _ in range(10):
            await asyncio.wait_for(pool.step(np.full(n, 3)), HANG)
        assert pool._runner.slab.info is None  # type: ignore[union-attr]
    assert len(looked) == 8


@pytest.mark.parametrize(("workers", "recv"), [(1, False), (2, False), (2, True)])
async def test_a_key_some_envs_give_as_a_dict_and_others_as_a_value_fails_that_step_naming_the_envs(
    workers: int, recv: bool
) -> None:
    # gymnasium's vector envs put the value among the dict's keys, or fail, by which env comes first; the pool fails
    # the step with what each env gave, however the envs are spread over workers, and goes on
    n = 4
    async with aioenv.Pool(COLUMNS, n, num_workers=workers, executor="inline", batch_size=n) as pool:
        await asyncio.wait_for(pool.reset(seed=0), HANG)
        actions = np.array([0, 6, 7, 7])  # env 1: a dict "sub", envs 2 and 3: a float
        if recv:
            pool.send(actions)
        call = pool.recv() if recv else pool.step(actions)
        with pytest.raises(ProtocolError) as caught:
            await asyncio.wait_for(call, HANG)
        message = str(caught.value)
        assert "key 'sub' is a dict from envs [1], a value from envs [2, 3]" in message, message
        obs, *_, info = await asyncio.wait_for(pool.step(np.zeros(n, np.int64)), HANG)  # the next step is whole
        assert info["env_id"].tolist() == list(range(n))
        assert obs[:, 1].tolist() == [2.0] * n  # every env stepped twice: the failed step was a step


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
async def test_mujocos_infos_read_in_blocks_give_gymnasiums_batches(mode: str) -> None:
    # Ant-v5's nine infos, eight np.float64s and an np.float32: the area reads its masks and each dtype's values in
    # one copy each (InfoArea.blocks), and the batches are SyncVectorEnv's, the ends of same_step episodes among them
    n = 4
    auto = gym.vector.AutoresetMode[mode.upper()]
    ref = gym.vector.SyncVectorEnv([lambda: gym.make("Ant-v5")] * n, autoreset_mode=auto)
    rng = np.random.default_rng(5)
    async with aioenv.Pool("Ant-v5", n, num_workers=2, executor="inline", autoreset_mode=mode) as pool:
        assert_same((await asyncio.wait_for(pool.reset(seed=3), HANG))[0], ref.reset(seed=3)[0])
        ended = 0
        for t in range(120):
            actions = rng.uniform(-1, 1, (n, 8)).astype(np.float32)
            got = await asyncio.wait_for(pool.step(actions), HANG)
            want = ref.step(actions)
            got[4].pop("env_id")
            assert_same(got, want, f"step {t}")
            ended += int((want[2] | want[3]).sum())
        area = pool._runner.slab.info  # type: ignore[union-attr]
        assert area is not None
        assert area.blocks is not None
        assert [block.dtype for block, _ in area.blocks[1]] == [np.dtype(np.float64), np.dtype(np.float32)]
    ref.close()
    assert ended > 0  # (Ant falls over under random actions within a few dozen steps)
