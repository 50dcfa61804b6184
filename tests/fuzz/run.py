"""``make fuzz``: coverage-guided fuzzing of the wire decoders with atheris (libFuzzer for Python).

    python -m tests.fuzz.run                       # every target, FUZZ_SECONDS (60) each
    python -m tests.fuzz.run spaces --seconds 600
    python -m tests.fuzz.run --seeds               # (re)write the seed inputs of every target

Each target (:mod:`tests.fuzz.targets`) starts from its corpus, ``tests/fuzz/corpus/TARGET/``, and adds
to it the inputs that reach new code, so the corpus grows with each run and is kept in the repository.
A crash stops the run and leaves its input in ``tests/fuzz/crashes/``: fix the bug, then move the file
into the target's corpus, where ``tests/fuzz/test_corpus.py`` replays it on every ``make test``.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS, CRASHES = HERE / "corpus", HERE / "crashes"


def _fuzz_one(name: str, argv: list[str]) -> None:
    """In a child process of its own (atheris takes the process over): instrument aioenv's code for
    coverage as it is first imported, then fuzz target ``name``; ``argv``: libFuzzer's arguments."""
    import atheris

    with atheris.instrument_imports(include=["aioenv"]):
        import aioenv.wire.protocol
        import aioenv.wire.spaces  # noqa: F401
    from tests.fuzz.targets import TARGETS

    atheris.Setup([sys.argv[0], *argv], TARGETS[name])
    atheris.Fuzz()


def write_seeds() -> None:
    """Seed inputs: real messages of every kind, and descriptions of every kind of space."""
    import numpy as np
    from gymnasium import spaces as gs

    from aioenv.wire.protocol import Key, Op, encode, leaves_to_wire, pack
    from aioenv.wire.spaces import describe_space
    from tests.fuzz.targets import FRAME_SEP

    arrays: list[np.ndarray] = []
    act = leaves_to_wire([np.zeros((2, 3), np.float32), np.array(["ab", "c"], object)], arrays)
    messages = [
        encode(Op.STEP, {Key.ID: 7, Key.ENV: [0, 1], Key.ACT: act}, arrays),
        encode(Op.RESET, {Key.ID: 8, Key.ENV: [0, 1], Key.SEED: [1, None], Key.OPT: {"a": 1}}),
        encode(Op.RESULT, {Key.ID: 7, Key.OBS: [0], Key.ERRORS: {}}, [np.arange(70_000, dtype=np.uint8)]),
        encode(Op.PING, {Key.ID: 1}),
    ]
    space_list = [
        gs.Box(-1, 1, (2, 3), np.float32), gs.Discrete(5, start=-2), gs.MultiDiscrete([2, 3]), gs.MultiBinary(4),
        gs.Text(5, charset="abc"), gs.Dict({"a": gs.Discrete(2), "b": gs.Tuple([gs.Box(0, 1, ()), gs.Text(2)])}),
    ]  # fmt: skip
    seeds = {
        "protocol": [FRAME_SEP.join(bytes(memoryview(f)) for f in frames) for frames in messages],
        "spaces": [pack(describe_space(space)) for space in space_list],
    }
    for target, inputs in seeds.items():
        (CORPUS / target).mkdir(parents=True, exist_ok=True)
        for data in inputs:
            (CORPUS / target / f"seed-{hashlib.sha1(data).hexdigest()[:12]}").write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    """Fuzz the chosen targets one after another, each for ``--seconds``; 1 when one crashed."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:  # before anything imports aioenv: it must be instrumented as it loads
        _fuzz_one(argv[1], argv[2:])
        return 0
    from tests.fuzz.targets import TARGETS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("targets", nargs="*", metavar="TARGET", help=f"default: all of {', '.join(TARGETS)}")
    p.add_argument("--seconds", type=int, default=60, help="per target (default 60)")
    p.add_argument("--seeds", action="store_true", help="write the seed inputs and stop")
    args = p.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        p.error(f"unknown target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
    if args.seeds:
        write_seeds()
        return 0
    CRASHES.mkdir(exist_ok=True)
    failed = 0
    for name in args.targets or list(TARGETS):
        corpus = CORPUS / name
        corpus.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "tests.fuzz.run", "--child", name, str(corpus), f"-max_total_time={args.seconds}"]
        cmd += [f"-artifact_prefix={CRASHES}/{name}-", "-print_final_stats=1", "-max_len=4096"]
        print(f"== fuzzing {name} for {args.seconds} s (corpus: {len(list(corpus.iterdir()))} inputs)", flush=True)
        code = subprocess.run(cmd, check=False).returncode
        print(f"== {name}: {'no crash' if code == 0 else f'CRASH (exit {code}): see {CRASHES}'}, corpus now "
              f"{len(list(corpus.iterdir()))} inputs", flush=True)  # fmt: skip
        failed += code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
