"""Shared printing helpers for the CLI (the library never prints)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as _string
from typing import Any

from rich.console import Console

WIDE = 160
"""Columns when stdout is not a terminal (pipes, CI logs): rich would assume 80."""


def silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null: later flushes of stdout go nowhere quietly."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """The reader of stdout went away (``hetplan ... | head``): stop quietly, status 0
        (rich's default exits 1)."""
        silence_stdout()
        raise SystemExit(0)


console = _Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else WIDE)


def print_json(data: Any) -> None:
    """Print one JSON object on stdout."""
    sys.stdout.write(dumps_indented(data) + "\n")


def dumps_indented(data: Any) -> str:
    """``json.dumps(data, indent=2)``, the same text, several times faster.

    With an indent the standard library encodes in Python through nested generators (its C
    encoder takes no indent): seconds for the tens of megabytes of a large search's ranking.
    Here each container appends its pieces to one list, and a container reached again (the
    ranking's best candidate is also one of its candidates and of its Pareto front) is
    encoded once and re-indented: strings hold no raw newline, so every newline of its text
    opens a line at least as deep as the container."""
    out: list[str] = []
    _Encoder(out).value(data, 0)
    return "".join(out)


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}  # json's spellings
_SHARED_DEPTH = 2
"""Containers down to this depth are remembered by identity (few, and the only shared ones)."""


def _scalar(o: Any) -> str | None:
    """``o`` as ``json`` writes it, or None for a container (subclasses as ``json`` has them)."""
    t = type(o)
    if t is str:
        return _string(o)
    if t is float:
        text = float.__repr__(o)
        return _NON_FINITE.get(text, text)
    if t is int:
        return int.__repr__(o)
    if t is dict or t is list or t is tuple:
        return None
    if isinstance(o, str):
        return _string(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        text = float.__repr__(o)
        return _NON_FINITE.get(text, text)
    if isinstance(o, list | tuple | dict):
        return None
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _key(k: Any) -> str:
    """A dict key as ``json`` writes it (a number, bool or None as its JSON text, quoted)."""
    if isinstance(k, str):
        return _string(k)
    if isinstance(k, float | bool | int) or k is None:
        text = _scalar(k)
        assert text is not None
        return _string(text)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


class _Encoder:
    """One ``dumps_indented`` call: its output and the containers already encoded."""

    def __init__(self, out: list[str]) -> None:
        self.out = out
        self.seen: dict[int, tuple[str, int]] = {}  # id -> (text, depth encoded at)

    def value(self, o: Any, depth: int) -> None:
        text = _scalar(o)
        if text is None:
            self.container(o, depth)
        else:
            self.out.append(text)

    def container(self, o: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> None:
        if depth > _SHARED_DEPTH:
            self.items(o, depth)
        else:
            self.shared(o, depth)

    def shared(self, o: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> None:
        """A container near the top, which may be reached again."""
        known = self.seen.get(id(o))
        if known is None:
            start = len(self.out)
            self.items(o, depth)
            text = "".join(self.out[start:])
            del self.out[start:]
            self.seen[id(o)] = known = (text, depth)
        text, at = known
        if depth > at:
            text = text.replace("\n", "\n" + "  " * (depth - at))
        elif depth < at:
            text = text.replace("\n" + "  " * (at - depth), "\n")
        self.out.append(text)

    def items(self, o: dict[Any, Any] | list[Any] | tuple[Any, ...], depth: int) -> None:
        out = self.out
        inner = "\n" + "  " * (depth + 1)
        pairs: Iterable[tuple[str, Any]]
        if isinstance(o, dict):
            brackets = "{}"
            pairs = (((_string(k) if type(k) is str else _key(k)) + ": ", v) for k, v in o.items())
        else:
            brackets = "[]"
            pairs = (("", v) for v in o)
        if not o:
            out.append(brackets)
            return
        sep = brackets[0] + inner
        for label, v in pairs:
            text = _scalar(v)
            if text is None:
                out.append(sep + label)
                self.container(v, depth + 1)
            else:
                out.append(sep + label + text)
            sep = "," + inner
        out.append("\n" + "  " * depth + brackets[1])
