"""How a worker process ends once its envs are closed: :func:`leave`.

An interpreter that exits normally tears itself down: a last collection, then every module's objects
deallocated one by one. For a worker that has imported numpy, gymnasium and ZeroMQ that takes ~0.1 s of CPU
(measured: a process with a worker's imports exits in ~100 ms, and in ~9 ms with ``os._exit``), and a pool's
``close()`` waits for it: it was most of the ~0.14 s a pool of two workers took to close, against
``AsyncVectorEnv``'s 0.012 s (its workers, forked by ``multiprocessing``, end with ``os._exit``).

So a worker that was told to close, and has closed its envs, does what an exit must do and skips the rest:
it runs the ``atexit`` handlers (an env's, logging's, coverage's), flushes every file still open for writing
(a file an env left open keeps its data, as the teardown would have flushed it), flushes its standard streams
and calls ``os._exit``. What it skips: ``__del__`` methods of objects still alive at exit, and waiting for
non-daemon threads an env started and did not end in its ``close()``. A failing worker (an exception, a
usage error) exits the usual way, with its traceback.
"""

from __future__ import annotations

import _io
import atexit
import contextlib
import gc
import itertools
import os
import sys
from typing import NoReturn

__all__ = ["flush_open_files", "leave"]


def leave(code: int) -> NoReturn:
    """End this process with exit status ``code`` without tearing the interpreter down (see the module)."""
    try:
        atexit._run_exitfuncs()
        flush_open_files()
    finally:
        os._exit(code)


def flush_open_files() -> int:
    """Flush every file object of this process that is open for writing, the standard streams last; how many
    were flushed. A file whose flush fails is left as it is (the teardown would have lost its data too)."""
    kinds = _io_classes()
    objects = gc.get_objects()
    # One pass over the objects, in C (compress, map, a set's __contains__): a Python loop, or the io.IOBase
    # ABC's isinstance, per object costs several times as much over a worker's ~35,000 objects.
    found = itertools.compress(objects, map(kinds.__contains__, map(type, objects)))
    streams = {id(sys.stdout), id(sys.stderr)}
    files = [obj for obj in found if id(obj) not in streams]
    del objects
    flushed = 0
    for f in [*files, sys.stdout, sys.stderr]:
        with contextlib.suppress(Exception):
            if f is not None and not f.closed and f.writable():
                f.flush()
                flushed += 1
    return flushed


def _io_classes() -> set[type]:
    """Every class of file object: ``_io._IOBase`` (the base of ``io``'s classes, C or Python) and its subclasses."""
    classes: set[type] = set()
    todo: list[type] = [_io._IOBase]
    while todo:
        kind = todo.pop()
        if kind not in classes:
            classes.add(kind)
            todo.extend(kind.__subclasses__())
    return classes
