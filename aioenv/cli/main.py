"""The ``aioenv`` command line: ``demo`` (a real pool, what it did), ``bench`` (env-steps/s of a pool),
``serve`` (a server many clients share), ``worker`` (a worker host for a server), ``ray-hosts`` (worker hosts
placed by Ray), ``status`` (the state of a server) and ``keygen`` (CURVE keys)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

import aioenv
from aioenv import _hot
from aioenv.transport.zmqio import check_tcp_port
from aioenv.wire.options import EXECUTORS, Executor

if TYPE_CHECKING:
    from aioenv.server.server import Port

F = TypeVar("F", bound=Callable[..., Any])

# Options shared by several commands.
LOG_LEVEL = click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
)
KEY = click.option(
    "--key", type=click.Path(exists=True, dir_okay=False), default=None, help="your .key_secret (--auth)"
)


def executor_option(help_text: str) -> Callable[[F], F]:
    """``--executor`` (inline, thread or async; inline by default), with the command's own help."""
    return click.option("--executor", type=click.Choice(EXECUTORS), default="inline", show_default=True, help=help_text)


def silence_option(flag: str, help_text: str) -> Callable[[F], F]:
    """A heartbeat timeout: seconds of silence (>= 0.5, 10 by default) before the peer is given up."""
    return click.option(flag, type=click.FloatRange(0.5), default=10.0, show_default=True, help=help_text)


_SIZE = re.compile(r"(\d+)\s*(?:([KMG])(i?B)?)?", re.IGNORECASE)


def byte_size(_ctx: click.Context, param: click.Parameter, value: Any) -> int:
    """A positive number of bytes: ``268435456``, or with a unit: ``256MiB`` or ``256M`` (binary, 2**20),
    ``256MB`` (decimal, 10**6); likewise K and G."""
    if isinstance(value, int):
        return value
    form = _SIZE.fullmatch(str(value).strip())
    if form is None or int(form[1]) < 1:
        raise click.BadParameter(f"expected a positive size such as 268435456, 256MiB or 1GB, got {value!r}")
    if form[2] is None:
        return int(form[1])
    unit = {"k": 1, "m": 2, "g": 3}[form[2].lower()]
    decimal = (form[3] or "").lower() == "b"
    return int(form[1]) * (10 ** (3 * unit) if decimal else 1 << (10 * unit))


def seconds_option(flag: str, default: float, help_text: str, least: float = 0.001) -> Callable[[F], F]:
    """A duration in seconds (at least ``least``) with a default, e.g. a deadline of ``aioenv serve --http``."""
    return click.option(
        flag, type=click.FloatRange(least), default=default, show_default=True, help=f"seconds {help_text}"
    )


def count_option(flag: str, default: int, help_text: str) -> Callable[[F], F]:
    """A bound that counts things (an int >= 1), e.g. a bound per client of ``aioenv serve``."""
    return click.option(flag, type=click.IntRange(1), default=default, show_default=True, help=help_text)


def size_option(flag: str, default: str, help_text: str) -> Callable[[F], F]:
    """A size in bytes (see :func:`byte_size`), e.g. a bound per client of ``aioenv serve``."""
    return click.option(
        flag, type=str, callback=byte_size, default=default, show_default=True, metavar="SIZE", help=help_text
    )


SERVER_KEY = click.option(
    "--server-key", type=click.Path(exists=True, dir_okay=False), default=None, help="the server's .key"
)


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
    from aioenv.cli.demo import run_demo

    console = Console()
    console.print(f"[bold]aioenv demo[/]: {num_envs} CartPole-v1 envs, send/recv with batches of half the pool")
    try:
        report = aioenv.run(run_demo(num_envs, steps, num_workers, seed))
    except aioenv.AioEnvError as exc:  # e.g. a bad AIOENV_WORKER_START or AIOENV_WORKER_SCHED: a line, not a traceback
        raise click.ClickException(exc.message) from exc
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
    table.add_row("hot path", _hot.describe())
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

    from aioenv.cli.quickbench import run_bench

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
    table.add_column("measured")
    table.add_column("figure", justify="right")
    table.add_row("startup (make + reset)", f"{result.startup_s * 1000:.0f} ms")
    table.add_row("await pool.step (all envs)", f"{result.step_per_s:,.0f} env-steps/s")
    table.add_row(f"send / recv (batches of {max(1, num_envs // 2)})", f"{result.sendrecv_per_s:,.0f} env-steps/s")
    table.add_row("hot path", _hot.describe())
    console.print(table)
    console.print("peers side by side: python benchmarks/bench_core.py")


_ENDPOINT = re.compile(r"(tcp://[^/\s]+:(\d+|\*)|ipc://\S+)")
_UNIX = re.compile(r"unix://\S+")


def _endpoint(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an address ZeroMQ cannot use, saying what one looks like."""
    if value is None or _ENDPOINT.fullmatch(value):
        return _in_range(param, value)
    raise click.BadParameter(f"expected an address such as tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555), got {value!r}")


def _client_endpoint(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An address of the server's client port: ZeroMQ's, or a unix socket's (``unix:///path``: clients on this
    machine, without ZeroMQ; see aioenv.transport.stream)."""
    if value is None or _ENDPOINT.fullmatch(value) or _UNIX.fullmatch(value):
        return _in_range(param, value)
    raise click.BadParameter(
        f"expected an address such as tcp://HOST:PORT (e.g. tcp://127.0.0.1:5555) or unix:///PATH, got {value!r}"
    )


def _in_range(param: click.Parameter, value: str | None) -> str | None:
    """``value`` unless its tcp port is out of range (ZeroMQ would wrap it round to another port): 0-65535 for
    an address to bind (``--bind``, ``--worker-bind``), 1-65535 for one to connect to."""
    if value is not None:
        try:
            check_tcp_port(value, bind=param.name in ("bind", "worker_bind"))
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


def _allow(_ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """Refuse an ``--allow-env`` pattern or an ``--allow-env-kwargs`` rule a server could never serve (see
    aioenv.server.allow), saying what one looks like."""
    from aioenv.server.allow import KwargsRule, compile_pattern

    check = compile_pattern if param.name == "allow" else KwargsRule.parse
    for spec in value:
        try:
            check(spec)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from exc
    return value


@main.command()
@click.option(
    "--bind",
    default="tcp://127.0.0.1:5555",
    show_default=True,
    callback=_client_endpoint,
    help="where clients connect (unix:///PATH: clients on this machine, without ZeroMQ); beyond loopback only "
    "with --auth or --insecure",
)
@executor_option("executor of pools whose client does not choose one")
@click.option("--workers", type=click.IntRange(1), default=None, help="workers per pool (default: usable cores)")
@click.option(
    "--max-envs",
    type=click.IntRange(1),
    default=None,
    help="envs of all clients together  [default: 256 per usable core]",
)
@click.option("--max-envs-per-client", type=click.IntRange(1), default=None, help="envs of one client (see --auth)")
@count_option("--max-pools-per-client", 64, "open pools of one client (with --auth: one key; else one connection)")
@click.option(
    "--max-workers",
    type=click.IntRange(1),
    default=None,
    help="worker processes of all pools together  [default: 4 per usable core]",
)
@click.option(
    "--max-workers-per-client",
    type=click.IntRange(1),
    default=None,
    help="worker processes of one client's pools (more asked are not started)  [default: 2 per usable core]",
)
@click.option(
    "--allow-env",
    "allow",
    multiple=True,
    callback=_allow,
    help="env names clients may make (pattern, repeatable: 'CartPole-*', 'mypkg.envs:*'; wildcards never match "
    "':', nor '.' after it); without it: gymnasium ids only",
)
@click.option(
    "--allow-env-kwargs",
    "allow_kwargs",
    multiple=True,
    callback=_allow,
    metavar="PATTERN=NAME[,NAME...]",
    help="env_kwargs names clients may pass to envs matching PATTERN (repeatable; PATTERN=*: any name); "
    "without it: none",
)
@silence_option("--client-timeout", "seconds a client may be silent before its pool is closed")
@click.option(
    "--auth",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="CURVE keys directory (aioenv keygen): admit only the public keys in it",
)
@click.option(
    "--insecure",
    is_flag=True,
    help="serve a non-loopback --bind or --worker-bind without --auth: anyone who reaches it is served (SECURITY.md)",
)
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None, help="serve Prometheus /metrics")
@click.option(
    "--metrics-bind", default="127.0.0.1", show_default=True, metavar="ADDRESS", help="the address of --metrics-port"
)
@click.option(
    "--worker-bind",
    default=None,
    callback=_endpoint,
    help="where worker hosts join (aioenv worker --connect), e.g. tcp://10.0.0.5:5556; beyond loopback only with "
    "--auth or --insecure",
)
@click.option(
    "--local-capacity",
    type=click.IntRange(0),
    default=None,
    help="with --worker-bind: envs this machine hosts itself (default: only when no worker host has room; 0: none)",
)
@silence_option("--worker-timeout", "seconds a worker host may be silent before its envs are re-made elsewhere")
@size_option("--max-message-bytes", "256MiB", "largest message a client may send (clients refuse larger ones)")
@count_option("--max-queued", 1000, "messages queued for one client before it is dropped")
@size_option("--max-unread-bytes", "512MiB", "bytes of replies a client may leave unread before it is dropped")
@size_option("--max-unread-total", "2GiB", "all clients' unread bytes together: past it the one with most is dropped")
@click.option(
    "--http",
    "http_bind",
    default=None,
    metavar="HOST:PORT",
    help="also serve the --http-env envs over HTTP and OpenEnv's WebSocket protocol (docs/openenv.md); beyond "
    "loopback only with --http-token-file or --insecure",
)
@click.option(
    "--http-env",
    "http_envs",
    multiple=True,
    metavar="NAME=SESSIONS",
    help="an env the HTTP port serves and how many sessions of it may be open at once (repeatable)",
)
@click.option(
    "--http-env-kwargs",
    "http_env_kwargs",
    multiple=True,
    metavar="NAME=JSON",
    help="the kwargs of an --http-env env, a JSON object (repeatable)",
)
@click.option(
    "--http-default-env", default=None, metavar="NAME", help="the env of /ws and /schema (default: the first)"
)
@click.option(
    "--http-token-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="a file holding the bearer token every HTTP request and WebSocket must carry",
)
@count_option("--http-max-sessions-per-client", 256, "HTTP and WebSocket sessions one peer address may hold")
@seconds_option("--http-step-timeout", 60.0, "a reset or step over HTTP may run: an overrun fails, the env is replaced")
@seconds_option("--http-idle-timeout", 300.0, "an HTTP or WebSocket session may stay silent before it is closed", 0.5)
@click.option("--log-json", is_flag=True, help="one JSON object per log line")
@LOG_LEVEL
def serve(
    bind: str,
    executor: Executor,
    workers: int | None,
    max_envs: int | None,
    max_envs_per_client: int | None,
    max_pools_per_client: int,
    max_workers: int | None,
    max_workers_per_client: int | None,
    allow: tuple[str, ...],
    allow_kwargs: tuple[str, ...],
    client_timeout: float,
    auth: str | None,
    insecure: bool,
    metrics_port: int | None,
    metrics_bind: str,
    worker_bind: str | None,
    local_capacity: int | None,
    worker_timeout: float,
    max_message_bytes: int,
    max_queued: int,
    max_unread_bytes: int,
    max_unread_total: int,
    http_bind: str | None,
    http_envs: tuple[str, ...],
    http_env_kwargs: tuple[str, ...],
    http_default_env: str | None,
    http_token_file: str | None,
    http_max_sessions_per_client: int,
    http_step_timeout: float,
    http_idle_timeout: float,
    log_json: bool,
    log_level: str,
) -> None:
    """Serve env pools to clients over the network (aioenv.make(..., endpoint="tcp://HOST:PORT")).

    Runs until SIGTERM or SIGINT, then closes every pool and stops every worker.
    """
    from aioenv.logs import configure_logging
    from aioenv.server.peers import PeerLimits
    from aioenv.server.server import ServerConfig
    from aioenv.server.server import serve as run_server

    configure_logging(log_level, json_lines=log_json)
    _check_worker_env()
    _fork_workers_unless_told()  # a pool for every client that asks
    if local_capacity is not None and worker_bind is None:
        raise click.UsageError("--local-capacity needs --worker-bind (without worker hosts every env is local)")
    machine = {  # not given: the defaults that fit this machine (ServerConfig's)
        name: value
        for name, value in (
            ("max_envs", max_envs),
            ("max_workers", max_workers),
            ("max_workers_per_client", max_workers_per_client),
        )
        if value is not None
    }
    config = ServerConfig(
        bind=bind,
        executor=executor,
        workers=workers,
        **machine,
        max_envs_per_client=max_envs_per_client,
        max_pools_per_client=max_pools_per_client,
        allow=allow,
        allow_kwargs=allow_kwargs,
        client_timeout=client_timeout,
        auth=auth,
        insecure=insecure,
        metrics_port=metrics_port,
        metrics_bind=metrics_bind,
        worker_bind=worker_bind,
        local_capacity=local_capacity,
        worker_timeout=worker_timeout,
        limits=PeerLimits(max_message_bytes, max_queued, max_unread_bytes, max_unread_total),
    )
    http = _http_port(
        http_bind,
        http_envs,
        http_env_kwargs,
        http_default_env,
        http_token_file,
        insecure=insecure,
        max_sessions_per_client=http_max_sessions_per_client,
        step_timeout=http_step_timeout,
        idle_timeout=http_idle_timeout,
        max_message_bytes=max_message_bytes,
        executor=executor,
        workers=workers,
    )
    try:
        aioenv.run(run_server(config, ports=[http] if http is not None else []))
    except (zmq_error(), OSError) as exc:  # OSError: a unix:// path in use or not writable
        raise click.ClickException(f"cannot serve on {bind}: {exc}") from exc
    except ValueError as exc:  # e.g. an --auth directory without the server's key
        raise click.ClickException(str(exc)) from exc
    except aioenv.AioEnvError as exc:  # e.g. a bad AIOENV_WORKER_START
        raise click.ClickException(exc.message) from exc


def _http_port(
    bind: str | None,
    envs: tuple[str, ...],
    env_kwargs: tuple[str, ...],
    default_env: str | None,
    token_file: str | None,
    **options: Any,
) -> Port | None:
    """``aioenv serve``'s HTTP port (:class:`aioenv.openenv.serve.HttpPort`) as its options say; None: no port."""
    if bind is None:
        if envs or env_kwargs or default_env or token_file:
            raise click.UsageError(
                "--http-env, --http-env-kwargs, --http-default-env and --http-token-file need --http HOST:PORT"
            )
        return None
    try:
        from aioenv.openenv.serve import (
            HttpConfig,
            HttpPort,
            http_exposure,
            parse_http_env,
            parse_http_env_kwargs,
            split_bind,
        )
    except ImportError as exc:
        raise click.ClickException(f"--http needs the openenv extra (pip install 'aioenv[openenv]'): {exc}") from None
    from aioenv.errors import UsageError

    try:
        split_bind(bind)
        parsed = dict(parse_http_env(e) for e in envs)
        kwargs = dict(parse_http_env_kwargs(k) for k in env_kwargs)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if unknown := sorted(set(kwargs) - set(parsed)):
        raise click.UsageError(f"--http-env-kwargs names {unknown}, which no --http-env serves")
    if not parsed:
        raise click.UsageError("--http serves the envs named by --http-env NAME=SESSIONS: name at least one")
    token = None
    if token_file is not None:
        with open(token_file, encoding="utf-8") as f:
            token = f.read().strip()
        if len(token) < 16:
            raise click.UsageError(f"the token in {token_file} is {len(token)} characters: use at least 16")
    try:
        http_exposure(bind, token=token, insecure=options["insecure"])
    except UsageError as exc:
        raise click.UsageError(exc.message) from None
    config = HttpConfig(bind=bind, envs=parsed, env_kwargs=kwargs, default_env=default_env, token=token, **options)
    return HttpPort(config)


def _fork_workers_unless_told() -> None:
    """See :func:`aioenv.transport.spawn.fork_unless_told`: a server, and a worker host, start workers for pool
    after pool."""
    from aioenv.transport.spawn import fork_unless_told

    fork_unless_told()


def _check_worker_env() -> None:
    """Refuse a bad AIOENV_WORKER_SCHED, AIOENV_WORKER_THREADS or AIOENV_WORKER_START before any worker process
    starts."""
    from aioenv.errors import UsageError
    from aioenv.transport.spawn import check_worker_env

    try:
        check_worker_env()
    except UsageError as exc:
        raise click.UsageError(str(exc)) from exc


@main.command()
@click.option(
    "--connect",
    required=True,
    callback=_endpoint,
    help="the server's worker port (its --worker-bind), e.g. tcp://HOST:5556",
)
@click.option("--capacity", type=click.IntRange(1), required=True, help="envs this host may run at once")
@executor_option("executor of the worker processes (the server sends only pools of this kind)")
@click.option("--name", default=None, help="this host's name on the server (default: hostname-pid)")
@silence_option("--server-timeout", "seconds of server silence before this host stops its workers and joins again")
@KEY
@SERVER_KEY
@LOG_LEVEL
def worker(
    connect: str,
    capacity: int,
    executor: str,
    name: str | None,
    server_timeout: float,
    key: str | None,
    server_key: str | None,
    log_level: str,
) -> None:
    """Run worker processes for a server (aioenv serve --worker-bind): a worker host.

    Runs until SIGTERM or SIGINT, then stops its worker processes and tells the server.
    """
    from aioenv.logs import configure_logging
    from workers.agent import WorkerHost

    curve = _key_pair(key, server_key)
    configure_logging(log_level, json_lines=False)
    _check_worker_env()
    _fork_workers_unless_told()  # the workers of every pool its server places here
    try:
        host = WorkerHost(connect, capacity, executor, name=name, server_timeout=server_timeout, curve=curve)
        code = host.run()
    except zmq_error() as exc:
        raise click.ClickException(f"cannot connect to {connect}: {exc}") from exc
    except ValueError as exc:  # e.g. an unreadable key file
        raise click.ClickException(str(exc)) from exc
    if code:
        raise SystemExit(code)


@main.command("ray-hosts")
@click.option("--connect", required=True, callback=_endpoint, help="the server's worker port (0.0.0.0: this node's)")
@click.option("--count", type=click.IntRange(1), required=True, help="worker hosts (Ray actors) to place")
@click.option("--capacity", type=click.IntRange(1), required=True, help="envs each host may run at once")
@executor_option("executor of the hosts' worker processes")
@click.option("--num-cpus", type=click.FloatRange(0), default=1.0, show_default=True, help="CPUs per host")
@click.option("--resource", multiple=True, metavar="NAME=AMOUNT", help="a custom Ray resource per host (repeatable)")
@click.option(
    "--strategy",
    type=click.Choice(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]),
    default="SPREAD",
    show_default=True,
    help="how the hosts go on the nodes (a placement group)",
)
@click.option("--max-restarts", type=click.IntRange(-1), default=-1, show_default=True, help="-1: no limit")
@click.option("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or this machine's)")
@click.option("--name-prefix", default=None, help="hosts are named PREFIX-0, PREFIX-1, ... (default: ray-XXXX)")
@silence_option("--server-timeout", "seconds of server silence before a host stops its workers and joins again")
@KEY
@SERVER_KEY
@LOG_LEVEL
def ray_hosts(
    address: str | None, resource: tuple[str, ...], key: str | None, server_key: str | None, **kw: Any
) -> None:
    """Place worker hosts on a Ray cluster as Ray actors (pip install 'aioenv[ray]'); see docs/ray.md.

    Runs until SIGTERM or SIGINT, then stops the hosts and removes their actors and placement group.
    """
    from aioenv.logs import configure_logging
    from aioenv.ray.command import parse_resources, run_ray_hosts

    configure_logging(kw["log_level"], json_lines=False)
    try:
        run_ray_hosts(address, {**kw, "resources": parse_resources(resource), "keys": _key_pair(key, server_key)})
    except (aioenv.AioEnvError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--name", default="server", show_default=True, help="key name: NAME.key and NAME.key_secret")
def keygen(directory: str, name: str) -> None:
    """Write a CURVE key pair into DIRECTORY (for aioenv serve --auth DIRECTORY and its clients).

    The server uses DIRECTORY/server.key_secret and admits every DIRECTORY/*.key; a client passes
    curve_keys=("NAME.key_secret", "server.key").
    """
    from aioenv.transport.auth import create_keys

    try:
        public, secret = create_keys(directory, name)
    except (ValueError, FileExistsError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"public key: {public}\nkey pair (keep private): {secret}")


def _key_pair(key: str | None, server_key: str | None) -> tuple[str, str] | None:
    """``--key`` and ``--server-key`` together, or neither: one alone is a mistake, not "no auth"."""
    if (key is None) != (server_key is None):
        raise click.UsageError("--key and --server-key go together (both are needed for a server with --auth)")
    return (key, server_key) if key is not None and server_key is not None else None


@main.command()
@click.argument("endpoint", callback=_client_endpoint)
@click.option("--timeout", type=click.FloatRange(0.1), default=3.0, show_default=True, help="seconds to wait")
@click.option("--quiet", "-q", is_flag=True, help="print nothing: the exit code says whether the server answered")
@click.option("--json", "as_json", is_flag=True, help="print the state as JSON")
@KEY
@SERVER_KEY
def status(endpoint: str, timeout: float, quiet: bool, as_json: bool, key: str | None, server_key: str | None) -> None:
    """Print the state of the aioenv server at ENDPOINT (tcp://HOST:PORT or unix:///PATH); exit 1 when it does not
    answer."""
    from aioenv.server.status import fetch_status
    from aioenv.transport.stream import is_stream

    if is_stream(endpoint) and key is not None:
        raise click.UsageError("--key and --server-key are for tcp:// servers: a unix:// socket has no CURVE")
    try:
        state = aioenv.run(fetch_status(endpoint, timeout, _key_pair(key, server_key)))
    except (aioenv.AioEnvError, TimeoutError, OSError, zmq_error()) as exc:
        if quiet:
            sys.exit(1)
        raise _unanswered(endpoint, timeout, exc) from exc
    if quiet:
        return
    if as_json:
        click.echo(json.dumps(state))
        return
    console = Console()
    console.print(_summary_table(state, endpoint))
    if state.get("pools"):
        console.print(_pools_table(state["pools"], state.get("pools_not_listed")))
    if state.get("worker_endpoint"):
        console.print(_hosts_table(state["worker_endpoint"], state.get("hosts") or []))


def _unanswered(endpoint: str, timeout: float, exc: BaseException) -> click.ClickException:
    """What `aioenv status` says when the server did not answer, answered with a refusal, or was not reached."""
    if isinstance(exc, TimeoutError):
        return click.ClickException(f"no answer from {endpoint} within {timeout:g} s")
    if isinstance(exc, aioenv.UsageError):  # asked nothing: e.g. an address ZeroMQ cannot dial
        return click.ClickException(exc.message)
    if isinstance(exc, aioenv.AioEnvError):  # it answered, with a refusal
        return click.ClickException(f"{endpoint} refused the status request: {exc}")
    return click.ClickException(f"cannot reach {endpoint}: {exc}")


def _summary_table(state: dict[str, Any], endpoint: str) -> Table:
    """The server's figures: version, uptime, clients, envs (of the limit), requests, protocol errors."""
    table = Table(title=_text(f"aioenv server at {state.get('endpoint', endpoint)}"))
    table.add_column("measure")
    table.add_column("value", justify="right")
    limit, most_workers = state.get("max_envs"), state.get("max_workers")
    rows = [
        ("version / protocol", f"{state.get('version')} / {state.get('protocol')}"),
        ("uptime", f"{_number(state.get('uptime'), 0):.0f} s"),
        ("clients / pools", f"{state.get('clients')} / {state.get('sessions')}"),
        ("envs", f"{state.get('envs')}" + (f" of {limit}" if limit else "")),
        ("worker processes", f"{state.get('workers')}" + (f" of {most_workers}" if most_workers else "")),
        ("requests in flight", str(state.get("in_flight"))),
        ("protocol errors", str(state.get("protocol_errors"))),
    ]
    for measure, value in rows:
        table.add_row(measure, _text(value))
    return table


def _text(value: Any) -> Text:
    """A server's value as a table cell: shown as it is, never as rich markup (``[bold]``), its control
    characters (an escape sequence, a newline) shown as escapes (a server's state holds names its clients
    chose)."""
    from aioenv.logs import printable

    return Text(printable(str(value)))


def _number(value: Any, default: float) -> float:
    """``value`` if it is a number, else ``default``."""
    return float(value) if isinstance(value, (int, float)) else default


def _pools_table(pools: list[list[Any]], not_listed: Any = 0) -> Table:
    """One row per open pool: client (who the server knows it is), the name it gave itself, env, envs."""
    table = Table(
        title="pools" + (f" ({not_listed} more not listed)" if isinstance(not_listed, int) and not_listed else "")
    )
    for column in ("client", "named", "env", "envs"):
        table.add_column(column)
    for client, env, n, *label in pools:
        table.add_row(_text(client), _text(label[0] if label else ""), _text(env), _text(n))
    return table


def _hosts_table(worker_endpoint: str, rows: list[dict[str, Any]]) -> Table:
    """One row per worker host: name, address, executor, envs, capacity, processes."""
    table = Table(title=_text(f"worker hosts (joining at {worker_endpoint})"))
    for column in ("host", "address", "executor", "envs", "capacity", "processes"):
        table.add_column(column, justify="right" if column in ("envs", "capacity", "processes") else "left")
    for row in rows:
        cap, procs = row.get("capacity"), row.get("processes")
        table.add_row(
            _text(row.get("name")),
            _text(row.get("host") or "-"),
            _text(row.get("executor")),
            _text(row.get("envs")),
            _text("unlimited" if cap is None else cap),
            _text("-" if procs is None else procs),
        )
    return table


def zmq_error() -> type[Exception]:
    """ZeroMQ's error type (imported late: the CLI starts fast)."""
    import zmq

    return zmq.ZMQError
