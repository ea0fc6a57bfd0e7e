"""Warnings raised in a rank, shown by the command that started the run.

A rank's stderr goes to the launcher's log, which nobody reads when the run succeeds: torch's
"target size different to the input size" (a mean squared error that broadcasts and trains the
wrong thing) was lost that way. Each rank writes every distinct warning (category and message)
once, as a JSON line, to ``warnings-<rank>.jsonl`` in the run's step-log folder;
:class:`WarningReader` follows those files, and the command shows each distinct warning once.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from hetplan.run.loop.steplog import complete_lines

FILE_GLOB = "warnings-*.jsonl"
RUNTIME_SOURCES = ("/torch/distributed/",)
"""Warnings raised there concern how hetplan drives torch's collectives and checkpoints (e.g.
DCP's deprecations), not the user's training: they stay in the launcher's log."""
MESSAGE_CHARS = 400  # characters of a warning's message kept (torch's run to ~200)


@dataclass(frozen=True, kw_only=True)
class RankWarning:
    """One distinct warning of a rank."""

    rank: int
    category: str
    message: str
    where: str
    """``file.py:line`` of the code that warned."""

    @property
    def key(self) -> tuple[str, str]:
        """What makes two warnings the same (whichever rank or line raised them)."""
        return (self.category, self.message)

    def text(self) -> str:
        return f"warning from rank {self.rank}: {self.category}: {self.message} ({self.where})"


def warnings_path(directory: Path, rank: int) -> Path:
    return directory / f"warnings-{rank}.jsonl"


@contextlib.contextmanager
def captured_warnings(directory: Path | None, rank: int) -> Iterator[None]:
    """While the block runs, write this rank's distinct warnings to ``directory`` (nothing
    changes without a directory: warnings go to stderr, the launcher's log)."""
    if directory is None:
        yield
        return
    path = warnings_path(directory, rank)
    seen: set[tuple[str, str]] = set()
    with warnings.catch_warnings():  # restores showwarning and the filters afterwards
        original = warnings.showwarning

        def show(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if any(part in Path(filename).as_posix() for part in RUNTIME_SOURCES):
                original(message, category, filename, lineno, file, line)  # to the log
                return
            found = RankWarning(
                rank=rank,
                category=category.__name__,
                message=str(message)[:MESSAGE_CHARS],
                where=f"{Path(filename).name}:{lineno}",
            )
            if found.key in seen:
                return
            seen.add(found.key)
            try:
                directory.mkdir(parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(found.__dict__) + "\n")
            except OSError:  # the folder is gone or full: the log keeps it at least
                original(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield


class WarningReader:
    """Follows the warning files of a folder: :meth:`read_new` returns the warnings written
    since its last call (a line still being written is kept for the next)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[Path, int] = {}

    def read_new(self) -> list[RankWarning]:
        out: list[RankWarning] = []
        for path in sorted(self.directory.glob(FILE_GLOB)):
            data, self._offsets[path] = complete_lines(path, self._offsets.get(path, 0))
            out += [w for w in map(_parse, data.splitlines()) if w is not None]
        return out


def _parse(line: bytes) -> RankWarning | None:
    try:
        raw: Any = json.loads(line)
        return RankWarning(
            rank=int(raw["rank"]),
            category=str(raw["category"]),
            message=str(raw["message"]),
            where=str(raw["where"]),
        )
    except (ValueError, KeyError, TypeError):
        return None
