"""``python -m aioenv.openenv.appserver pkg.module:app PORT PARENT``: serve an OpenEnv app on ``127.0.0.1:PORT`` with
uvicorn for as long as process ``PARENT`` (the worker that started it) lives.

A worker's children die with it when it is reaped (its process group is killed), but a worker that dies with the
process that made its pool (``PR_SET_PDEATHSIG``) is reaped by nobody: this server watches its parent itself and
exits when it is gone, so a SIGKILLed client leaves no app server (and no session of it) behind.
"""

from __future__ import annotations

import os
import sys
import threading
import time

#: Seconds between two looks at the parent.
WATCH_INTERVAL = 0.5


def watch_parent(parent: int) -> None:
    """Exit this process at once when it is no longer ``parent``'s child (the parent died)."""
    while os.getppid() == parent:
        time.sleep(WATCH_INTERVAL)
    os._exit(0)


def main(argv: list[str]) -> None:
    """Serve ``argv = [target, port, parent]``."""
    if len(argv) != 3:
        raise SystemExit("usage: python -m aioenv.openenv.appserver pkg.module:app PORT PARENT_PID")
    target, port, parent = argv[0], int(argv[1]), int(argv[2])
    if os.getppid() != parent:
        raise SystemExit(f"the process that started this app server ({parent}) is gone")
    threading.Thread(target=watch_parent, args=(parent,), name="watch-parent", daemon=True).start()
    import uvicorn

    uvicorn.run(target, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main(sys.argv[1:])
