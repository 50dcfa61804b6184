"""The ``aioenv`` command line: ``demo`` (a real pool, what it did) and ``bench`` (env-steps/s of a pool)."""

from __future__ import annotations

import sys

import click
from rich.console import Console
from rich.table import Table

import aioenv


@click.group()
@click.version_option(aioenv.__version__, prog_name="aioenv")
def main() -> None:
    """aioenv: an asyncio environment pool for RL and LLM agents."""


@main.command()
@click.option("--num-envs", "-n", default=16, show_default=True, type=click.IntRange(1), help="envs in the pool")
@click.option("--steps", default=5000, show_default=True, type=click.IntRange(1), help="env-steps to run")
@click.option("--workers", "num_workers", default=None, type=click.IntRange(1), help="worker processes")
@click.option("--seed", default=0, show_default=True, type=int)
def demo(num_envs: int, steps: int, num_workers: int | None, seed: int) -> None:
    """Run a real pool of CartPole envs with send/recv and print what it did."""
    from aioenv.demo import run_demo

    console = Console()
    console.print(f"[bold]aioenv demo[/]: {num_envs} CartPole-v1 envs, send/recv with batches of half the pool")
    report = aioenv.run(run_demo(num_envs, steps, num_workers, seed))
    table = Table(title="what the pool did", show_header=True)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("env", report.env)
    table.add_row("envs / workers", f"{report.num_envs} / {report.num_workers}")
    table.add_row("batch size (recv)", str(report.batch_size))
    table.add_row("startup (make + reset)", f"{report.startup_s * 1000:.0f} ms")
    table.add_row("env-steps", f"{report.steps:,}")
    table.add_row("env-steps / s", f"{report.steps_per_s:,.0f}")
    table.add_row("episodes finished", f"{report.episodes:,}")
    table.add_row("mean episode return", f"{report.mean_return:.1f}")
    console.print(table)
    console.print("the pool is closed and its workers are gone.")


@main.command()
@click.argument("env", default="CartPole-v1")
@click.option("--num-envs", "-n", default=32, show_default=True, type=click.IntRange(2), help="envs in the pool")
@click.option("--seconds", default=3.0, show_default=True, type=click.FloatRange(0.1), help="per mode")
@click.option("--workers", "num_workers", default=None, type=click.IntRange(1), help="worker processes")
def bench(env: str, num_envs: int, seconds: float, num_workers: int | None) -> None:
    """Measure env-steps/s of a pool on ENV (a gymnasium id or pkg.module:factory)."""
    from rich.progress import Progress

    from aioenv.quickbench import run_bench

    console = Console()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"{env} x {num_envs}", total=1.0)
        try:
            result = aioenv.run(
                run_bench(env, num_envs, seconds, num_workers, lambda f: progress.update(task, completed=f))
            )
        except aioenv.AioEnvError as exc:
            raise click.ClickException(exc.message) from exc
    table = Table(title=f"aioenv bench: {result.env}, {result.num_envs} envs, {result.num_workers} workers")
    table.add_column("mode")
    table.add_column("env-steps / s", justify="right")
    table.add_row("startup (make + reset)", f"{result.startup_s * 1000:.0f} ms")
    table.add_row("await pool.step (all envs)", f"{result.step_per_s:,.0f}")
    table.add_row(f"send / recv (batches of {max(1, num_envs // 2)})", f"{result.sendrecv_per_s:,.0f}")
    console.print(table)
    console.print("peers side by side: python benchmarks/bench_core.py")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
