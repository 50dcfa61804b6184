"""Which env names and which ``env_kwargs`` a server's clients may ask for (``aioenv serve --allow-env`` and
``--allow-env-kwargs``).

An env name is a gymnasium id (``"CartPole-v1"``) or a name of code, ``"pkg.module:factory"`` (or gymnasium's own
``"module:EnvId-v0"``, which imports ``module``). A pattern names factories, never a path through attributes:

- ``*``, ``?`` and ``[...]`` never match a ``:``, so a pattern without one (``"CartPole-*"``) matches gymnasium
  ids only, and one with a colon (``"mypkg.envs:*"``) matches names of code in the modules it spells;
- after the colon they never match a ``.`` either: ``"mypkg.envs:*"`` matches ``"mypkg.envs:make_env"``, never
  ``"mypkg.envs:os.system"`` (a dotted path is allowed only where a pattern spells it out, e.g.
  ``"mypkg.envs:Envs.make"``);
- a name of code with a part that starts with ``_`` (``"mypkg.envs:__class__"``, ``"mypkg._impl:make"``) is
  refused whatever the patterns say, and a pattern that spells one is refused when the server starts.

What a name that passes reaches is checked too, by the worker process that makes the env, before anything is
called (:func:`workers.sources.reach`): a class or a function defined in that module, or a gymnasium id it
registers. The server never imports the module itself.

``env_kwargs`` from a client reach the env's constructor, so none are allowed unless the operator names them per
env pattern: ``"CartPole-*=sutton_barto_reward,max_episode_steps"`` (``PATTERN=*``: any name). Names that would
point gymnasium at other code (:data:`aioenv.wire.options.CODE_KWARGS`) are refused even then.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aioenv.errors import UsageError
from aioenv.wire.options import CODE_KWARGS, private_part

__all__ = ["AllowList", "KwargsRule", "compile_pattern"]

_KWARG = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _translate(pattern: str, never: str) -> str:
    """A regular expression for ``pattern`` (``*``, ``?``, ``[seq]``, ``[!seq]`` as in fnmatch) whose wildcards
    never match a character of ``never``."""
    avoid = re.escape(never)
    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        i += 1
        if c == "*":
            out.append(f"[^{avoid}]*")
        elif c == "?":
            out.append(f"[^{avoid}]")
        elif c == "[" and (end := pattern.find("]", i + 1 if pattern[i : i + 1] in ("!", "]") else i)) != -1:
            body = pattern[i:end]
            i = end + 1
            negate = body.startswith("!")
            body = body[1:] if negate else body
            chars = re.escape(body).replace(r"\-", "-")
            out.append(f"(?![{avoid}])[{'^' if negate else ''}{chars}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression of an ``--allow-env`` pattern; ``ValueError`` for one that could never be served
    (a second colon, an empty side of the colon, a part that starts with ``_``)."""
    module, colon, attr = pattern.partition(":")
    if not colon:
        return re.compile(_translate(pattern, ":"))
    if not module or not attr or ":" in attr:
        raise ValueError(f"expected PATTERN or MODULE_PATTERN:FACTORY_PATTERN, got {pattern!r}")
    if (part := private_part(pattern)) is not None:
        raise ValueError(f"{pattern!r} names {part!r}, which starts with '_': a server never serves private names")
    return re.compile(f"{_translate(module, ':')}:{_translate(attr, '.:')}")


@dataclass(frozen=True)
class KwargsRule:
    """One ``--allow-env-kwargs PATTERN=NAME,...`` entry: the env_kwargs names envs matching ``pattern`` take
    (``any_name``: ``PATTERN=*``)."""

    pattern: str
    names: frozenset[str]
    any_name: bool

    @classmethod
    def parse(cls, spec: str) -> KwargsRule:
        """A rule from its spelling, ``ValueError`` saying what one looks like."""
        pattern, eq, names = spec.rpartition("=")
        if not eq or not pattern or not names:
            raise ValueError(f"expected ENV_PATTERN=NAME[,NAME...] or ENV_PATTERN=*, got {spec!r}")
        compile_pattern(pattern)
        listed = [n.strip() for n in names.split(",")]
        if listed == ["*"]:
            return cls(pattern, frozenset(), True)
        for name in listed:
            if not _KWARG.fullmatch(name):
                raise ValueError(f"{spec!r}: {name!r} is no keyword argument name")
            if name in CODE_KWARGS:
                raise ValueError(f"{spec!r}: {name!r} would point gymnasium at other code; a server never passes it")
        return cls(pattern, frozenset(listed), False)


class AllowList:
    """The env names (``envs``, ``--allow-env`` patterns) and env_kwargs (``kwargs``, ``--allow-env-kwargs``
    rules) a server serves; ``ValueError`` for a pattern or rule it could not."""

    def __init__(self, envs: Sequence[str] = (), kwargs: Sequence[str] = ()) -> None:
        self.envs = tuple(envs)
        self._envs = [compile_pattern(p) for p in self.envs]
        self.rules = [KwargsRule.parse(spec) for spec in kwargs]
        self._rules = [(compile_pattern(r.pattern), r) for r in self.rules]

    def check(self, env: str, kwargs: Mapping[str, Any]) -> None:
        """``UsageError`` naming the env, what it asked for and what this server allows, unless it serves ``env``
        with ``kwargs``."""
        if env.count(":") > 1:
            raise UsageError(f"env {env!r} is no name: expected a gymnasium id or 'pkg.module:factory'")
        if (part := private_part(env)) is not None:
            raise UsageError(f"env {env!r} names {part!r}, which starts with '_': a server never serves private names")
        if self.envs and not any(p.fullmatch(env) for p in self._envs):
            hint = ""
            if ":" in env:
                hint = "; a pattern's wildcards never match ':' nor, after the ':', a '.'"
            raise UsageError(f"env {env!r} is not allowed on this server (allowed: {', '.join(self.envs)}{hint})")
        if not self.envs and ":" in env:  # 'module:callable' runs any importable function: opt in by name
            raise UsageError(
                f"env {env!r} names code to run on the server; this server serves gymnasium ids only "
                "(start it with --allow-env PATTERN to allow 'pkg.module:factory' names)"
            )
        self._check_kwargs(env, kwargs)

    def _check_kwargs(self, env: str, kwargs: Mapping[str, Any]) -> None:
        rules = [r for p, r in self._rules if p.fullmatch(env)]
        for name in kwargs:
            if not isinstance(name, str):
                raise UsageError(f"env {env!r}: env_kwargs names must be strings, got {name!r}")
            if name in CODE_KWARGS:
                raise UsageError(
                    f"env {env!r}: env_kwargs {name!r} would point gymnasium at other code; a server never passes it"
                )
            if not any(r.any_name or name in r.names for r in rules):
                named = sorted({n for r in rules for n in r.names})
                allowed = f"it allows {', '.join(map(repr, named))} for this env" if named else "it allows none"
                raise UsageError(
                    f"env {env!r}: env_kwargs {name!r} is not allowed on this server ({allowed}); its operator "
                    f"allows it with --allow-env-kwargs '{env}={name}' (or a pattern that matches the env)"
                )
