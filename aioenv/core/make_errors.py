"""The one error a coordinator's ``start()`` raises when making envs failed on one or more workers.

Each worker reports the envs it could not make (:class:`~aioenv.errors.EnvError` per env, or a worker's own
failure); the caller gets one error that says what went wrong for all of them at once when they agree (a
wrong gymnasium id, a bad ``env_kwargs``), else the lowest env's, with every env's error in ``errors``.
"""

from __future__ import annotations

from aioenv.errors import AioEnvError, EnvError

__all__ = ["start_failure"]


def start_failure(failed: list[BaseException], num_envs: int) -> BaseException:
    """The one error ``start()`` raises when making envs failed on one or more workers.

    When every env that failed failed the same way (a wrong gymnasium id, a bad ``env_kwargs``), the
    error says so for all of them at once instead of naming whichever env a worker reported first;
    otherwise it is the lowest env's error, which says how many more failed. ``errors`` holds every
    env's error either way.
    """
    if not all(isinstance(e, AioEnvError) for e in failed):
        return next(e for e in failed if not isinstance(e, AioEnvError))
    errs = [e for e in failed if isinstance(e, AioEnvError)]
    by_env: dict[int, AioEnvError] = {}
    for err in errs:
        by_env.update(err.errors or ({err.env_id: err} if err.env_id is not None else {}))
    if not by_env:
        return errs[0]
    merged = _same_make_error(by_env, num_envs)
    if merged is not None:
        return merged
    ids = sorted(by_env)
    first = by_env[ids[0]]
    if len(ids) > 1:
        first.message = f"{first.message} (and {len(ids) - 1} more envs failed to make: see err.errors)"
        first.args = (first.message,)
    first.errors = by_env
    return first


def _same_make_error(by_env: dict[int, AioEnvError], num_envs: int) -> EnvError | None:
    """One EnvError for all of ``by_env`` (env id -> its make error) when every env failed the same way
    (same remote type and message); else None."""
    ids = sorted(by_env)
    first = by_env[ids[0]]
    if not all(isinstance(e, EnvError) for e in by_env.values()):
        return None
    kinds = {(e.remote_type, e.remote_message) for e in by_env.values() if isinstance(e, EnvError)}
    if len(kinds) != 1 or not isinstance(first, EnvError):
        return None
    which = f"all {num_envs} envs" if len(ids) == num_envs else f"{len(ids)} of {num_envs} envs ({_ids_text(ids)})"
    merged = EnvError(
        f"make failed for {which}: {first.remote_message}",
        remote_type=first.remote_type,
        remote_message=first.remote_message,
        remote_traceback=first.remote_traceback,
    )
    merged.errors = by_env
    return merged


def _ids_text(ids: list[int]) -> str:
    shown = ", ".join(map(str, ids[:8]))
    return f"envs {shown}, ..." if len(ids) > 8 else f"envs {shown}"
