"""Message header keys are named once (``aioenv.wire.protocol.Key``) and used by name everywhere."""

from __future__ import annotations

import ast
import pathlib

import pytest

from aioenv.wire.protocol import Key, decode, encode

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = sorted(p for top in ("aioenv", "workers") for p in (ROOT / top).rglob("*.py"))
NAMES = {name: value for name, value in vars(Key).items() if name.isupper()}


def test_every_key_has_its_own_wire_name() -> None:
    assert len(set(NAMES.values())) == len(NAMES)
    assert all(isinstance(value, str) and value for value in NAMES.values())


def test_encode_writes_its_reserved_keys_by_name() -> None:
    header, _ = decode(encode("ping", {Key.ID: 7}))
    assert set(header) == {Key.VERSION, Key.OP, Key.ID}


def _literal_header_keys(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, key)`` of every string literal used as a key of a message: in the field map passed to
    ``encode(op, {...})``, or read as ``header["k"]`` / ``header.get("k")``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "encode":
            fields = node.args[1] if len(node.args) > 1 else None
            if isinstance(fields, ast.Dict):
                found += [(k.lineno, k.value) for k in fields.keys if isinstance(k, ast.Constant)]
        if (
            isinstance(node, ast.Subscript)
            and getattr(node.value, "id", "") == "header"
            and isinstance(node.slice, ast.Constant)
        ):
            found.append((node.lineno, node.slice.value))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and getattr(node.func.value, "id", "") == "header"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_spells_a_header_key_as_a_literal(path: pathlib.Path) -> None:
    literal = _literal_header_keys(ast.parse(path.read_text()))
    assert not literal, f"{path.relative_to(ROOT)} spells header keys as literals (use Key): {literal}"
