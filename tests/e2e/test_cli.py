"""The command line and the runnable examples, run as a user runs them (subprocesses)."""

from __future__ import annotations

import re

import pytest

from tests.support.scripts import ROOT, run_example, run_python


def test_demo_runs_a_real_pool_and_reports_it() -> None:
    proc = run_python("-m", "aioenv.cli", "demo", "--num-envs", "4", "--steps", "2000", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "CartPole-v1" in out
    assert re.search(r"envs / workers\s+│\s+4 / 2", out), out
    steps = re.search(r"env-steps\s+│\s+([\d,]+)", out)
    assert steps is not None
    assert int(steps.group(1).replace(",", "")) >= 2000
    episodes = re.search(r"episodes finished\s+│\s+([\d,]+)", out)
    assert episodes is not None, out
    assert int(episodes.group(1).replace(",", "")) > 0, out
    assert "workers are gone" in out
    assert re.search(r"hot path\s+│\s+compiled", out), out  # (built here: tests/core/test_speedups.py)


def test_demo_and_bench_say_when_the_pool_runs_its_pure_python_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOENV_PURE_PYTHON", "1")
    demo = run_python("-m", "aioenv.cli", "demo", "--num-envs", "2", "--steps", "200")
    bench = run_python("-m", "aioenv.cli", "bench", "--num-envs", "2", "--seconds", "0.2")
    for proc in (demo, bench):
        assert proc.returncode == 0, proc.stderr
        assert re.search(r"hot path\s+│\s+pure Python \(AIOENV_PURE_PYTHON is set\)", proc.stdout), proc.stdout


def test_demo_refuses_a_bad_argument_clearly() -> None:
    proc = run_python("-m", "aioenv.cli", "demo", "--num-envs", "0")
    assert proc.returncode == 2
    assert "--num-envs" in proc.stderr
    assert "0" in proc.stderr


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("AIOENV_WORKER_START", "AIOENV_WORKER_START must be 'fork' or 'exec', got 'vfork'"),
        ("AIOENV_WORKER_SCHED", "AIOENV_WORKER_SCHED must be 'batch' or 'default', got 'vfork'"),
    ],
)
def test_demo_refuses_a_bad_worker_setting_in_one_line(monkeypatch: pytest.MonkeyPatch, name: str, says: str) -> None:
    monkeypatch.setenv(name, "vfork")
    proc = run_python("-m", "aioenv.cli", "demo", "--num-envs", "2", "--steps", "10")
    assert proc.returncode == 1
    assert f"Error: {says}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_refuses_a_bad_worker_start_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOENV_WORKER_START", "vfork")
    proc = run_python("-m", "aioenv.cli", "serve", "--bind", "tcp://127.0.0.1:0", timeout=60)
    assert proc.returncode == 2  # a usage error, before it listens, as a bad AIOENV_WORKER_THREADS or _SCHED
    assert "Error: AIOENV_WORKER_START must be 'fork' or 'exec', got 'vfork'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_version_option() -> None:
    import aioenv

    proc = run_python("-m", "aioenv.cli", "--version")
    assert proc.returncode == 0
    assert aioenv.__version__ in proc.stdout


def test_tour_example_runs() -> None:
    proc = run_example("tour.py")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"env 0: reward 1\.0", proc.stdout), proc.stdout


def test_readme_tour_is_the_example() -> None:
    readme = (ROOT / "README.md").read_text()
    tour = (ROOT / "examples" / "tour.py").read_text()
    body = tour[tour.index("async def main") : tour.index("\n\n\nif __name__")]
    assert body in readme, "the README's tour drifted from examples/tour.py"


def test_bench_measures_a_pool() -> None:
    proc = run_python("-m", "aioenv.cli", "bench", "CartPole-v1", "-n", "4", "--seconds", "0.3")
    assert proc.returncode == 0, proc.stderr
    rates = re.findall(r"│\s+([\d,]+) env-steps/s\s+│", proc.stdout)
    assert len(rates) == 2, proc.stdout
    assert all(int(r.replace(",", "")) > 0 for r in rates), proc.stdout
    assert "send / recv (batches of 2)" in proc.stdout
    assert re.search(r"startup \(make \+ reset\)\s+│\s+\d+ ms\s+│", proc.stdout), proc.stdout


def test_bench_reports_an_unknown_env_clearly() -> None:
    proc = run_python("-m", "aioenv.cli", "bench", "NoSuchEnv-v0", "--seconds", "0.3")
    assert proc.returncode == 1
    assert "NoSuchEnv" in proc.stderr
    assert "Traceback" not in proc.stderr


CONNECT = ("worker", "--connect", "tcp://127.0.0.1:1")
BAD_ARGUMENTS = [  # (the command's words, what its error must say): each exits 2 with a usage error
    ((*CONNECT,), ["--capacity"]),
    ((*CONNECT, "--capacity", "0"), ["--capacity", "0"]),
    ((*CONNECT, "--capacity", "4", "--key", __file__), ["--key and --server-key go together"]),
    (("status", "tcp://127.0.0.1:1", "--server-key", __file__), ["--key and --server-key go together"]),
    (
        ("worker", "--connect", "not-an-endpoint", "--capacity", "4"),
        ["expected an address such as tcp://HOST:PORT", "'not-an-endpoint'"],
    ),
    (("serve", "--bind", "nonsense"), ["Invalid value for '--bind'", "got 'nonsense'"]),
    (("serve", "--bind", "tcp://127.0.0.1:99999"), ["Invalid value for '--bind'", "port 99999", "0-65535"]),
    (("serve", "--worker-bind", "tcp://0.0.0.0:65536"), ["Invalid value for '--worker-bind'", "port 65536"]),
    (("status", "tcp://127.0.0.1:0"), ["Invalid value for 'ENDPOINT'", "port 0", "1-65535"]),
    (("worker", "--connect", "tcp://127.0.0.1:70000", "--capacity", "4"), ["'--connect'", "port 70000"]),
    (("serve", "--worker-bind", "5556"), ["Invalid value for '--worker-bind'", "got '5556'"]),
    (("serve", "--local-capacity", "4"), ["--local-capacity needs --worker-bind"]),
    (("serve", "--max-message-bytes", "lots"), ["'--max-message-bytes'", "such as 268435456, 256MiB or 1GB", "'lots'"]),
    (("serve", "--max-unread-bytes", "0"), ["'--max-unread-bytes'", "got '0'"]),
    (("serve", "--max-queued", "0"), ["'--max-queued'", "0"]),
]


def test_status_of_an_address_zeromq_cannot_dial_says_so() -> None:
    proc = run_python("-m", "aioenv.cli", "status", "tcp://ünïcode:5555")
    assert proc.returncode == 1, proc.stderr
    assert "Error: cannot connect to 'tcp://ünïcode:5555': ZeroMQ refuses the address (Invalid argument)" in proc.stderr
    assert "refused the status request" not in proc.stderr  # nothing was asked


@pytest.mark.parametrize(("words", "says"), BAD_ARGUMENTS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_worker_serve_and_status_refuse_bad_arguments_clearly(words: tuple[str, ...], says: list[str]) -> None:
    proc = run_python("-m", "aioenv.cli", *words)
    assert proc.returncode == 2, proc.stderr
    for text in says:
        assert text in proc.stderr, proc.stderr
