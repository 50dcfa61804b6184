"""Who may reach a server: ``aioenv serve`` listens where only this machine reaches it unless told otherwise.

The client port (``--bind``) and the worker port (``--worker-bind``) are served on a non-loopback address
(see :func:`aioenv.transport.zmqio.is_loopback`) only with ``--auth`` (CURVE: only peers whose public keys the
operator admitted get through) or when the operator says ``--insecure``; then every start logs, as warnings,
what anyone who reaches those ports can do. SECURITY.md's threat model says the same.
"""

from __future__ import annotations

from aioenv.errors import UsageError
from aioenv.transport.zmqio import is_loopback

__all__ = ["exposure_warnings"]

#: What an unauthenticated peer that reaches each port can do (the warning's and the refusal's words).
_REACH = {
    "--bind": "make and step envs that --allow-env admits, on this server's CPUs and memory, and read the "
    "state of every pool (aioenv status)",
    "--worker-bind": "join as a worker host: it is sent the pools placed on it (env names, their kwargs, every "
    "action) and its answers (observations, rewards) go to their clients unchecked",
}


def exposure_warnings(bind: str, worker_bind: str | None, *, auth: str | None, insecure: bool) -> list[str]:
    """What a server logs, as warnings, at start: one line per port that listens beyond this machine without
    authentication (only with ``insecure``), saying what anyone who reaches it can do.

    Raises:
        UsageError: such a port without ``insecure``, naming the address and the ways out; ``insecure`` with
            ``auth`` (they contradict each other).
    """
    if insecure and auth is not None:
        raise UsageError(
            "--insecure and --auth contradict each other: with --auth every peer must hold an admitted key"
        )
    ports = [("--bind", bind)] + ([("--worker-bind", worker_bind)] if worker_bind is not None else [])
    found = [(flag, address) for flag, address in ports if auth is None and not is_loopback(address)]
    if found and not insecure:
        flag, address = found[0]
        raise UsageError(
            f"refusing to listen on {address} ({flag}) without --auth: it is not a loopback address, and anyone "
            f"who reaches it could {_REACH[flag]}. Pass --auth KEYDIR (aioenv keygen) to admit only the peers "
            "whose keys it holds; or bind a loopback address (tcp://127.0.0.1:PORT) or a unix:// socket; or, on a "
            "network that only trusted peers can reach, pass --insecure (see SECURITY.md)"
        )
    return [
        f"--insecure: {address} ({flag}) admits every peer without authentication: anyone who reaches it can "
        f"{_REACH[flag]}"
        for flag, address in found
    ]
