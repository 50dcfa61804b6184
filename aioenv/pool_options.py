"""What :func:`aioenv.make` and :class:`aioenv.Pool` are given, checked: each option in the form the pool keeps, or
an error that names the option, what it takes and what arrived (``ValueError``; ``UsageError`` for seeds, which
also name the env).
"""

from __future__ import annotations

from typing import Any

from aioenv._compat import AutoresetMode
from aioenv.errors import UsageError
from aioenv.transport.stream import is_stream
from aioenv.transport.zmqio import check_tcp_port
from aioenv.wire.options import (
    ON_TIMEOUT,
    POOL_EXECUTORS,
    AutoresetName,
    Executor,
    OnTimeout,
    PoolExecutor,
    choice,
    is_int,
    positive_int,
)

__all__ = [
    "MODES",
    "SEED_LIMIT",
    "check_in_process",
    "checked_allow_in_process",
    "checked_curve_keys",
    "checked_endpoint",
    "checked_on_timeout",
    "checked_seeds",
    "mode_name",
    "pool_executor",
    "worker_executor",
    "workers_asked",
]

#: The autoreset modes by the names `make` takes.
MODES: dict[AutoresetName, AutoresetMode] = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


def mode_name(mode: object) -> AutoresetName:
    """``autoreset_mode`` as given to :func:`make` (a gymnasium ``AutoresetMode`` or its name, any case) as
    its name; ``ValueError`` for anything else."""
    if isinstance(mode, AutoresetMode):
        return next(k for k, v in MODES.items() if v is mode)
    name = mode.lower() if isinstance(mode, str) else None
    for known in MODES:
        if name == known:
            return known
    raise ValueError(f"autoreset_mode must be one of {sorted(MODES)} or a gymnasium AutoresetMode, got {mode!r}")


def pool_executor(value: object) -> PoolExecutor:
    """``executor`` as given to :func:`make`, checked (``ValueError`` naming the choices)."""
    return choice("executor", value, POOL_EXECUTORS)


def worker_executor(executor: PoolExecutor) -> Executor:
    """The executor of a local pool's worker processes (and of its in-process worker: ``inline``)."""
    return "thread" if executor == "thread" else "async" if executor == "async" else "inline"


def workers_asked(value: object) -> int | None:
    """``num_workers`` as given to :func:`make`: None (the default), 0 (every env in this process) or a count."""
    if is_int(value) and value == 0:
        return 0
    try:
        return positive_int("num_workers", value, allow_none=True)
    except ValueError:
        raise ValueError(
            f"num_workers must be a positive int, 0 (every env in this process) or None, got {value!r}"
        ) from None


def check_in_process(executor: PoolExecutor | None, num_workers: int | None, **options: Any) -> None:
    """Refuse what envs in the caller's own process cannot do (``executor="in_process"``, or ``num_workers=0``):
    ``ValueError`` naming the option and what can."""
    if executor == "in_process":
        asked = "executor='in_process'"
        remote = "use 'inline', 'thread', 'async' or 'auto' (the server's choice)"
        instead = "use 'inline', 'thread' or 'async' (or 'auto', which then keeps them in worker processes)"
    elif num_workers == 0:
        asked = "num_workers=0"
        remote = "leave num_workers at None (the server's choice) or give a count"
        instead = "leave num_workers at None or give a count of worker processes"
    else:
        return
    if options["endpoint"] is not None:
        raise ValueError(
            f"{asked} runs envs in this process; a remote pool's envs run on the server's workers: {remote}"
        )
    # Envs stepped one after another here run on a thread of this process that a deadline can abandon
    # (workers.inproc); envs on threads or coroutines of their own here have no such way out.
    deadlines = executor in ("in_process", "inline")
    timeouts = () if deadlines else ("step_timeout", "reset_timeout")
    given = [name for name in (*timeouts, "max_worker_rss") if options[name]]
    if executor == "in_process" and num_workers:
        given.append("num_workers")
    if given:
        raise ValueError(
            f"{given[0]} is for envs in worker processes: {asked} runs them in this process, where a hung step "
            f"cannot be interrupted and a worker's memory cannot be told apart; {instead}"
        )


def checked_allow_in_process(value: object, executor: PoolExecutor | None, endpoint: str | None) -> bool:
    """``allow_in_process`` as given to :func:`make`: a bool, and True only where ``executor="auto"`` places a
    local pool's envs (``ValueError`` naming what it is for)."""
    if not isinstance(value, bool):
        raise ValueError(f"allow_in_process must be True or False, got {value!r}")
    if value and endpoint is not None:
        raise ValueError("allow_in_process=True lets envs run in this process; a remote pool's run on the server")
    if value and executor not in (None, "auto"):
        raise ValueError(
            f"allow_in_process=True lets executor='auto' place envs in this process; executor={executor!r} places "
            "them itself (executor='in_process' runs every env here)"
        )
    return value


def _on_timeout(value: object) -> OnTimeout:
    """``on_timeout`` as given to :func:`make`, checked (``ValueError`` naming the choices)."""
    return choice("on_timeout", value, ON_TIMEOUT)


def checked_endpoint(endpoint: object) -> str | None:
    """``endpoint`` if it is None or an aioenv server's address (``tcp://``, ``ipc://``, ``unix://``)."""
    if endpoint is not None and not (
        isinstance(endpoint, str)
        and endpoint.startswith(("tcp://", "ipc://", "unix://"))
        and not endpoint.endswith("://")
    ):
        raise ValueError(
            "endpoint must be an aioenv server address such as 'tcp://host:5555' or 'unix:///run/aioenv.sock', "
            f"got {endpoint!r}"
        )
    if endpoint is not None:
        check_tcp_port(endpoint, bind=False)
    return endpoint


def checked_curve_keys(curve_keys: object, endpoint: str | None) -> tuple[str, str] | None:
    """``curve_keys`` (a remote pool's: its own secret key file and the server's public key file) as two paths."""
    if curve_keys is None:
        return None
    if endpoint is None:
        raise ValueError("curve_keys are for a remote pool: give endpoint= too")
    if is_stream(endpoint):
        raise ValueError("curve_keys are for tcp:// servers: a unix:// socket is guarded by its file's mode")
    if not (isinstance(curve_keys, (tuple, list)) and len(curve_keys) == 2):
        raise ValueError(f"curve_keys must be (your .key_secret file, the server's .key file), got {curve_keys!r}")
    return str(curve_keys[0]), str(curve_keys[1])


def checked_on_timeout(on_timeout: object, mode: AutoresetName) -> OnTimeout:
    """``on_timeout``, checked, and refused as ``"truncate"`` with ``same_step`` autoreset."""
    checked = _on_timeout(on_timeout)
    if checked == "truncate" and mode == "same_step":
        raise ValueError(
            "on_timeout='truncate' needs autoreset_mode 'next_step' or 'disabled': in 'same_step' a truncated "
            "row must carry the next episode's first observation, which a replaced env cannot give in time"
        )
    return checked


#: Seeds are what numpy's SeedSequence takes: non-negative ints; the wire carries them as 64-bit ints.
SEED_LIMIT = 2**64


def checked_seeds(seed: Any, env_ids: list[int]) -> list[int | None]:
    """One seed (or None) per env of ``env_ids`` from ``seed``: an int (env ``i`` gets ``seed + i``) or a
    sequence with one int or None per env.

    Raises:
        UsageError: a seed that is not an int in ``[0, 2**64)``, naming the value and the env.
        ValueError: a sequence whose length is not the number of envs.
    """
    if is_int(seed):
        seeds: list[Any] = [int(seed) + i for i in env_ids]
    elif isinstance(seed, str | bytes) or not hasattr(seed, "__len__"):
        raise UsageError(
            f"seed must be None, an int, or a sequence with one int (or None) per env; got {seed!r}",
        )
    else:
        seeds = list(seed)
        if len(seeds) != len(env_ids):
            raise ValueError(f"seed has {len(seeds)} entries for {len(env_ids)} envs: give one per env, or an int")
    for env_id, value in zip(env_ids, seeds, strict=True):
        if value is not None and not (is_int(value) and 0 <= int(value) < SEED_LIMIT):
            raise UsageError(f"seed {value!r} for env {env_id}: a seed is an int in [0, 2**64) or None", env_id=env_id)
    return [None if value is None else int(value) for value in seeds]
