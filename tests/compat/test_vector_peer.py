"""``AioVectorEnv`` against gymnasium's ``AsyncVectorEnv``, side by side on real processes: errors and their types,
logging, bad actions, spaces and ``observation_mode``, ``shared_memory``, ``copy``, ``context``, ``daemon``,
``call``/``get_attr``/``set_attr`` values.

Every test runs the same env factories (``tests.envs.vector_peer``) through both vector envs and compares what
they return or raise. Where aioenv differs on purpose (documented in docs/migrating.md), the test says so and
checks both sides. Timeouts are hang guards only: slow steps wait for a gate file, not for a clock.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ClosedEnvironmentError
from gymnasium.error import Error as GymnasiumError
from gymnasium.vector import AsyncVectorEnv, VectorEnv

import aioenv
from aioenv._compat import HAS_AUTORESET_MODE, AutoresetMode
from aioenv.vector import AioVectorEnv
from tests.envs.faulty import SLOW, make_probe
from tests.envs.vector_peer import KILL, BoundsEnv, ChildEnv, Dot, EnvBoom, PeerEnv, ShapeEnv, broken_factory
from tests.support.compare import NEEDS_GYMNASIUM_1_1, assert_same
from tests.support.procs import HANG

Factory = Callable[[], gym.Env[Any, Any]]


def _quiet_close(envs: VectorEnv) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a call left pending on purpose warns
        if isinstance(envs, AsyncVectorEnv):
            envs.close(terminate=True)
        else:
            envs.close()


@contextlib.contextmanager
def both(fns: list[Factory], **kwargs: Any) -> Iterator[tuple[AsyncVectorEnv, AioVectorEnv]]:
    """The peer (made first: it forks before this test's aioenv loop thread exists) and an AioVectorEnv."""
    peer = AsyncVectorEnv(fns, **kwargs)
    try:
        aio = AioVectorEnv(fns, num_workers=2, **kwargs)
        try:
            yield peer, aio
        finally:
            _quiet_close(aio)
    finally:
        _quiet_close(peer)


def outcome(call: Callable[[], Any]) -> tuple[Any, BaseException | None, list[str]]:
    """``(result, exception, warning messages)`` of ``call()``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result, error = call(), None
        except Exception as exc:  # noqa: BLE001 - compared by the caller
            result, error = None, exc
    return result, error, [str(w.message) for w in caught]


def peer_message(error: BaseException) -> str:
    """What the env's exception said: ``AsyncVectorEnv`` raises ``type(exc)(exc)``, so its ``args[0]`` is the env's."""
    inner = error.args[0] if error.args else error
    return str(inner)


def log_shape(messages: list[str]) -> list[tuple[str, str]]:
    """What AsyncVectorEnv's error log says, order-free: (``Received ...`` line, last line of the traceback) per
    failed env, then the closing line. The traceback's frames differ (the peer's worker is not aioenv's)."""
    pairs = []
    for head, trace in zip(messages[:-1:2], messages[1:-1:2], strict=True):
        pairs.append((head, trace.removesuffix("\x1b[0m").rstrip().splitlines()[-1]))
    return [*sorted(pairs), ("end", messages[-1])]


# ---------------------------------------------------------------- env errors


@pytest.mark.parametrize("exc", [ValueError, KeyError, EnvBoom], ids=lambda e: e.__name__)
def test_step_error_has_the_env_s_own_type_and_the_other_envs_go_on(exc: type[Exception]) -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i, fail_action=2, exc=exc) for i in range(3)]
    with both(fns) as (peer, aio):
        peer.reset(seed=0)
        aio.reset(seed=0)
        _, want, want_logs = outcome(lambda: peer.step(np.array([0, 2, 2])))
        _, got, got_logs = outcome(lambda: aio.step(np.array([0, 2, 2])))
        assert type(want) is exc
        assert isinstance(got, exc), type(got).__mro__
        assert isinstance(got, aioenv.EnvError)
        assert peer_message(want) in str(got)
        assert "Remote traceback" in str(got)
        assert log_shape(got_logs) == log_shape(want_logs)
        assert len(got_logs) == 5  # two per failed env, then "Raising the last exception ..."
        # nothing lost: env 0 stepped; its row is in err.partial and its episode goes on
        obs, _, _, _, info = got.partial
        np.testing.assert_array_equal(info["env_id"], [0])
        np.testing.assert_array_equal(obs, [[0, 1]])
        obs, _ = aio.reset(options={"reset_mask": np.array([False, True, True])})
        np.testing.assert_array_equal(obs, [[0, 1], [1, 0], [2, 0]])  # env 0: its row of the failed step
        obs, *_ = aio.step(np.array([1, 1, 1]))
        np.testing.assert_array_equal(obs, [[0, 2], [1, 1], [2, 1]])


def test_reset_error_has_the_env_s_own_type() -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i, fail_seed=1) for i in range(2)]
    with both(fns) as (peer, aio):
        for envs in (peer, aio):
            _, error, logs = outcome(lambda envs=envs: envs.reset(seed=[0, 0]))
            assert error is None
            assert logs == []
        _, want, want_logs = outcome(lambda: peer.reset(seed=[1, 0]))
        _, got, got_logs = outcome(lambda: aio.reset(seed=[1, 0]))
        assert type(want) is ValueError
        assert str(want) == "Error in reset"
        assert isinstance(got, ValueError)
        assert isinstance(got, aioenv.EnvError)
        assert "Error in reset" in str(got)
        assert got.env_id == 0
        assert log_shape(got_logs) == log_shape(want_logs)
        assert 'raise self.exc("Error in reset")\nValueError: Error in reset' in got_logs[1]
        obs, _ = aio.reset(seed=[0, 0])  # the env works again after a reset
        np.testing.assert_array_equal(obs, [[0, 0], [1, 0]])


def test_a_factory_that_raises_fails_the_constructor_with_its_type() -> None:
    """``AsyncVectorEnv`` runs the first factory in this process, so its error has the factory's own type."""
    fns: list[Factory] = [broken_factory, functools.partial(PeerEnv, ident=1)]
    want, got = raised_by_both(fns)
    assert type(want) is KeyError
    assert isinstance(got, KeyError), type(got).__mro__
    assert isinstance(got, aioenv.EnvError)
    assert "no such env on purpose" in str(got)


def test_a_killed_env_process_is_an_eof_error_in_both() -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(2)]
    with both(fns) as (peer, aio):
        peer.reset(seed=0)
        aio.reset(seed=0)
        _, want, _ = outcome(lambda: peer.step(np.array([0, KILL])))
        _, got, _ = outcome(lambda: aio.step(np.array([0, KILL])))
        assert type(want) is EOFError
        assert isinstance(got, EOFError)
        assert isinstance(got, aioenv.WorkerCrashed)
        assert got.env_id == 1
        aio.reset(seed=[None, 5], options={"reset_mask": np.array([False, True])})  # env 1 was re-made
        obs, *_ = aio.step(np.array([0, 0]))
        np.testing.assert_array_equal(obs, [[0, 2], [1, 1]])


def test_wait_timeouts_are_multiprocessing_timeout_errors(gate: Any) -> None:
    """``step_wait(timeout)`` past the timeout: ``multiprocessing.TimeoutError`` with the peer's message (aioenv's
    is the builtin ``TimeoutError`` too); ``step_timeout``'s ``StepTimeout`` is one as well."""
    fns: list[Factory] = [functools.partial(make_probe, **gate.kwargs())] * 2
    with both(fns) as (peer, aio):
        for envs, seed in ((peer, 100), (aio, 0)):
            envs.reset(seed=seed)
            envs.step_async(np.array([SLOW, 0]))
            wait_for(os.path.join(gate.markers, f"started-{seed}"))
        _, want, _ = outcome(lambda: peer.step_wait(timeout=0.01))
        _, got, _ = outcome(lambda: aio.step_wait(timeout=0.01))
        assert type(want) is multiprocessing.TimeoutError
        assert isinstance(got, multiprocessing.TimeoutError)
        assert isinstance(got, TimeoutError)
        assert str(got) == str(want) == "The call to `step_wait` has timed out after 0.01 second(s)."
        gate.open()
    slow = AioVectorEnv([functools.partial(make_probe, slow_seconds=HANG)] * 2, step_timeout=0.3)
    try:
        slow.reset(seed=0)
        with pytest.raises(multiprocessing.TimeoutError) as caught:
            slow.step(np.array([SLOW, 0]))
        assert isinstance(caught.value, aioenv.StepTimeout)
    finally:
        slow.close()


def wait_for(path: str) -> None:
    deadline = time.monotonic() + HANG
    while not os.path.exists(path):
        assert time.monotonic() < deadline, path
        time.sleep(0.005)


# ---------------------------------------------------------------- actions


#: A bad batch of actions for 3 ``Discrete(4)`` envs, and what aioenv's error says arrived.
BAD_ACTIONS: dict[str, tuple[Any, str]] = {
    "fewer": (np.array([0, 1]), "got shape (2,) dtype int64"),
    "more": (np.array([0, 1, 1, 1]), "got shape (4,) dtype int64"),
    "scalar": (0, "got shape () dtype int64"),
    "none": (None, "got shape () dtype object"),
    "out-of-range": (np.array([0, 1, 9]), "invalid action for env 2: expected an action in Discrete(4)"),
    "fractional": (np.array([0.0, 1.5, 1.0]), "got shape (3,) dtype float64"),
}


@pytest.mark.parametrize("case", sorted(BAD_ACTIONS))
def test_bad_actions_are_refused_before_anything_is_sent(case: str) -> None:
    """Where the peer raises, aioenv raises the same type (an ``InvalidAction`` naming the envs, the space and
    what arrived); where the peer hands the action to the env (out of range, fractional), aioenv refuses it. No
    env moves: the next good step is every env's first."""
    if case == "fewer" and not HAS_AUTORESET_MODE:
        pytest.skip("gymnasium 1.0's AsyncVectorEnv sends 2 actions to 3 envs and waits for the third forever")
    actions, arrived = BAD_ACTIONS[case]
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(3)]
    with both(fns) as (peer, aio):
        peer.reset(seed=0)
        aio.reset(seed=0)
        _, want, _ = outcome(lambda: peer.step(actions))
        _, got, _ = outcome(lambda: aio.step(actions))
        assert isinstance(got, aioenv.InvalidAction)
        assert arrived in str(got)
        assert "Discrete(4)" in str(got)
        if want is None:  # the peer stepped the envs with it; aioenv refuses it
            # (gymnasium 1.0's AsyncVectorEnv also steps with the first 3 of 4 actions, dropping the rest)
            assert case in ("out-of-range", "fractional") or (case == "more" and not HAS_AUTORESET_MODE)
        else:
            assert isinstance(got, type(want)), (type(want), type(got).__mro__)
        obs, *_ = aio.step(np.array([1, 1, 1]))
        np.testing.assert_array_equal(obs[:, 1], [1, 1, 1])


def test_the_action_of_an_env_that_autoresets_is_not_used() -> None:
    """gymnasium's ``test_final_obs_info``: in next-step mode the step after an episode ended resets the env and
    ignores its action, so neither side refuses one outside the space there; elsewhere aioenv still does."""
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i, limit=2 + i) for i in range(2)]
    with both(fns) as (peer, aio):
        assert_same(aio.reset(seed=0), peer.reset(seed=0), "reset")
        for t, actions in enumerate(([1, 1], [1, 1], [9, 2], [1, 9], [2, 2])):
            assert_same(aio.step(np.array(actions)), peer.step(np.array(actions)), f"step {t}")
        _, got, _ = outcome(lambda: aio.step(np.array([1, 9])))  # env 1 does step here
        assert isinstance(got, aioenv.InvalidAction)
        assert got.env_id == 1


def test_bad_seeds_are_gymnasium_errors() -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(2)]
    with both(fns) as (peer, aio):
        _, want, _ = outcome(lambda: peer.reset(seed=[0, -3]))
        _, got, _ = outcome(lambda: aio.reset(seed=[0, -3]))
        assert type(want) is GymnasiumError
        assert isinstance(got, GymnasiumError)
        assert isinstance(got, aioenv.UsageError)
        assert str(want) in str(got)
        assert "env 1" in str(got)
        obs, _ = aio.reset(seed=[0, 3])  # nothing was sent
        np.testing.assert_array_equal(obs, [[0, 0], [1, 0]])


# ---------------------------------------------------------------- spaces and observation_mode


def raised_by_both(fns: list[Factory], **kwargs: Any) -> tuple[BaseException, BaseException]:
    _, want, _ = outcome(lambda: AsyncVectorEnv(fns, **kwargs))
    _, got, _ = outcome(lambda: AioVectorEnv(fns, **kwargs))
    assert want is not None
    assert got is not None
    return want, got


def test_envs_with_other_spaces_are_refused_with_runtime_errors() -> None:
    for fns, key in (
        (
            [functools.partial(ShapeEnv, obs="box"), functools.partial(ShapeEnv, obs="box2")],
            "however some of the sub-environments observation spaces are not equivalent. If this is intentional",
        ),
        (
            [functools.partial(ShapeEnv, act=2), functools.partial(ShapeEnv, act=3)],
            "In order to batch actions, the action spaces from all environments must be equal.",
        ),
    ):
        want, got = raised_by_both(fns)
        assert type(want) is RuntimeError
        assert isinstance(got, RuntimeError), type(got).__mro__
        assert key in str(want)
        assert key in str(got)
    want, got = raised_by_both([functools.partial(ShapeEnv, obs="box")] * 2, observation_mode="nope")
    assert type(want) is type(got) is ValueError
    assert str(want) == str(got)


def test_observation_mode_different_and_custom_spaces() -> None:
    fns: list[Factory] = [functools.partial(BoundsEnv, high=h) for h in (1.0, 2.0, 3.0)]
    single = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    custom = (gym.spaces.Box(0.0, 5.0, (3, 3), np.float32), single)
    for mode in ("different", custom):
        with both(fns, observation_mode=mode) as (peer, aio):
            assert aio.observation_space == peer.observation_space
            assert aio.single_observation_space == peer.single_observation_space == single
            assert aio.get_attr("observation_space") == peer.get_attr("observation_space")  # each env's own
            assert aio.get_attr("spec") == peer.get_attr("spec")
            for envs in (peer, aio):
                envs.set_attr("high", [4.0, 5.0, 6.0])
            assert aio.get_attr("high") == peer.get_attr("high") == (4.0, 5.0, 6.0)
            aio.reset(seed=0)
            peer.reset(seed=0)
            assert_same(aio.step(np.array([0, 1, 0])), peer.step(np.array([0, 1, 0])), f"step {mode}")
    other_shape: list[Factory] = [functools.partial(BoundsEnv, size=s) for s in (3, 3, 4)]
    for mode in ("different", custom):
        want, got = raised_by_both(other_shape, observation_mode=mode)
        assert isinstance(got, type(want)), (type(want), type(got).__mro__)
    want, got = raised_by_both(other_shape, observation_mode=custom)
    assert type(want) is RuntimeError
    assert "do not share a common shape and dtype" in str(got)


def test_shared_memory_refuses_what_the_peer_refuses() -> None:
    for obs, kind in (("dot", ValueError), ("sequence", TypeError)):
        fns: list[Factory] = [functools.partial(ShapeEnv, obs=obs)] * 2
        want, got = raised_by_both(fns)  # shared_memory=True, the default
        assert type(want) is type(got) is kind
        assert str(want) in str(got)
    fns = [functools.partial(ShapeEnv, obs="dot")] * 2
    with both(fns, shared_memory=False) as (peer, aio):
        assert_same(aio.reset(seed=4), peer.reset(seed=4), "reset")
        assert_same(aio.step(np.array([0, 1])), peer.step(np.array([0, 1])), "step")
        assert isinstance(aio.step(np.array([0, 1]))[0][0], Dot)


@NEEDS_GYMNASIUM_1_1
@pytest.mark.parametrize("copy", [True, False])
@pytest.mark.parametrize("shared_memory", [True, False])
def test_copy_means_what_it_means_for_the_peer(copy: bool, shared_memory: bool) -> None:
    """What a partial reset returns for the envs it does not reset after the caller changed the last returned
    observations in place: the changed values only with ``copy=False, shared_memory=True``."""
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(3)]
    mode = AutoresetMode.DISABLED
    with both(fns, copy=copy, shared_memory=shared_memory, autoreset_mode=mode) as (peer, aio):
        results = []
        for envs in (peer, aio):
            envs.reset(seed=0)
            obs, *_ = envs.step(np.array([1, 1, 1]))
            obs[:] = 99
            results.append(envs.reset(options={"reset_mask": np.array([True, False, False])}))
        assert_same(results[1], results[0], "partial reset")
        changed = bool((results[1][0][1:] == 99).all())
        assert changed == (not copy and shared_memory)


# ---------------------------------------------------------------- context, daemon, worker


def test_context_is_checked_as_the_peer_checks_it() -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=0)]
    want, got = raised_by_both(fns, context="nope")
    assert type(want) is type(got) is ValueError
    assert str(want) == str(got)
    with pytest.warns(UserWarning, match="never forks"):
        forked = AioVectorEnv(fns, context="fork")
    forked.close()
    spawned = AioVectorEnv(fns, context="spawn")  # no warning: the test suite turns warnings into errors
    spawned.close()


def test_envs_may_start_processes_whatever_daemon_is() -> None:
    """With ``daemon=True`` (the default) the peer's env processes cannot start children; aioenv's can."""
    fns: list[Factory] = [ChildEnv, ChildEnv]
    with both(fns, daemon=False) as (peer, aio):
        assert_same(aio.reset(seed=0), peer.reset(seed=0), "reset with daemon=False")
    with both(fns, daemon=True) as (peer, aio):
        _, want, _ = outcome(lambda: peer.reset(seed=0))
        assert type(want) is AssertionError
        assert "daemonic processes are not allowed to have children" in str(want)
        _, info = aio.reset(seed=0)
        np.testing.assert_array_equal(info["child_exitcode"], [0, 0])


# ---------------------------------------------------------------- calls, attributes, metadata


def test_calls_carry_any_value() -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(2)]
    with both(fns) as (peer, aio):
        assert aio.metadata == peer.metadata  # Dot(1) included: not a msgpack value
        for envs in (peer, aio):
            envs.reset(seed=3)
            envs.set_attr("tag", [Dot(4), {"k": (1, 2)}])
        assert aio.get_attr("tag") == peer.get_attr("tag") == (Dot(4), {"k": (1, 2)})
        for envs in (peer, aio):
            envs.set_attr("tag", 5)
        assert aio.get_attr("tag") == peer.get_attr("tag") == (5, 5)
        aio_rngs, peer_rngs = aio.np_random, peer.np_random
        assert [g.bit_generator.state for g in aio_rngs] == [g.bit_generator.state for g in peer_rngs]
        assert aio.np_random_seed == peer.np_random_seed == (3, 4)
        assert_same(aio.call("_obs"), peer.call("_obs"), "call")


@pytest.mark.parametrize(
    "call", [lambda envs: envs.call("reset"), lambda envs: envs.get_attr("nope")], ids=["reserved", "missing"]
)
def test_calls_raise_the_peer_s_errors(call: Callable[[VectorEnv], Any]) -> None:
    """A reserved name (``ValueError``, nothing sent) and a missing attribute (the env's ``AttributeError``)."""
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(2)]
    with both(fns) as (peer, aio):
        _, want, _ = outcome(lambda: call(peer))
        _, got, _ = outcome(lambda: call(aio))
        assert type(want) is type(got)
        assert str(want) == str(got)
        assert type(got) in (ValueError, AttributeError)
        assert aio.get_attr("t") == (0, 0)  # the envs still answer


def test_observations_and_attributes_of_the_peer() -> None:
    fns: list[Factory] = [functools.partial(PeerEnv, ident=i) for i in range(2)]
    with both(fns) as (peer, aio):
        assert_same(aio.observations, peer.observations, "before reset")
        for envs in (peer, aio):
            envs.reset(seed=0)
            envs.step(np.array([1, 2]))
        assert_same(aio.observations, peer.observations, "after a step")
        assert repr(aio) == repr(peer).replace("AsyncVectorEnv", "AioVectorEnv")
        for name in ("processes", "parent_pipes", "error_queue"):
            assert hasattr(peer, name)
            with pytest.raises(AttributeError, match="aioenv worker processes"):
                getattr(aio, name)
    with pytest.raises(ClosedEnvironmentError):
        aio.reset()
