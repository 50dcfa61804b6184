"""start_failure: one error for the envs that could not be made (aioenv.core.make_errors)."""

from __future__ import annotations

from aioenv.core.make_errors import start_failure
from aioenv.errors import EnvError, WorkerCrashed


def _env_error(env_id: int, message: str) -> EnvError:
    err = EnvError(f"env {env_id}: {message}", remote_type="ValueError", remote_message=message, env_id=env_id)
    err.errors = {env_id: err}
    return err


def test_envs_that_failed_alike_get_one_error_naming_them() -> None:
    err = start_failure([_env_error(3, "bad id"), _env_error(1, "bad id")], 10)
    assert isinstance(err, EnvError)
    assert str(err) == "make failed for 2 of 10 envs (envs 1, 3): bad id"
    assert sorted(err.errors or {}) == [1, 3]
    every = start_failure([_env_error(0, "bad id"), _env_error(1, "bad id")], 2)
    assert str(every) == "make failed for all 2 envs: bad id"


def test_envs_that_failed_differently_get_the_lowest_envs_error_counting_the_others() -> None:
    err = start_failure([_env_error(4, "one thing"), _env_error(2, "another")], 5)
    assert isinstance(err, EnvError)
    assert err.env_id == 2
    assert str(err).endswith("(and 1 more envs failed to make: see err.errors)")
    assert sorted(err.errors or {}) == [2, 4]


def test_an_error_that_is_not_aioenvs_comes_first() -> None:
    crash = RuntimeError("boom")
    assert start_failure([WorkerCrashed("gone", worker="w0.1"), crash], 2) is crash
