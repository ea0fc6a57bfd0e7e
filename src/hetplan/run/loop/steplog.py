"""Per-step JSON-lines logs of a run, and what they add up to.

Every rank appends one JSON object per step to ``<directory>/rank-<rank>.jsonl`` and flushes it
at once, so that another process (the CLI's progress line) can follow the run while it goes.
A rank's record holds its own figures only:

- ``step``: global step index, counting from the run's first step (a resumed run starts at its
  resume step);
- ``rank``, ``pipeline``, ``stage``;
- ``step_s``: this rank's time for the step (seconds);
- ``loss``: None except on a pipeline's last stage, where it is that pipeline's share of the
  global-batch mean loss (the step's loss is the SUM over the last-stage ranks);
- ``samples``: samples the rank's pipeline processed in the step if the rank is its pipeline's
  last stage, else 0 (the sum over ranks is the global batch);
- ``peak_memory_bytes``: int or None;
- ``timed``: False for warm-up steps.

A step is complete once every rank has written its record; :func:`complete_steps` sums those
into one :class:`StepSummary` per step and :func:`merge` writes them to one file.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from hetplan.serde import write_text_atomic

FILE_PREFIX = "rank-"
FILE_SUFFIX = ".jsonl"
RATE_WINDOW = 5  # recent steps whose median iteration time is the progress's step time
RECORD_KEYS = ("step", "rank", "pipeline", "stage", "step_s", "loss", "samples")


def log_path(directory: Path, rank: int) -> Path:
    """The file of ``rank``'s records in ``directory``."""
    return directory / f"{FILE_PREFIX}{rank}{FILE_SUFFIX}"


class StepLogWriter:
    """Appends one rank's step records to ``directory / f"rank-{rank}.jsonl"``.

    The file is opened (and ``directory`` created) on construction, line-buffered, and flushed
    after every record. Use it as a context manager or call :meth:`close`.
    """

    def __init__(self, directory: Path, rank: int) -> None:
        self.rank = rank
        self.path = log_path(directory, rank)
        directory.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one JSON line and flush it.

        ``rank`` may be left out (the writer's rank is filled in); a record of another rank, or
        one missing a required field (see the module's doc), is a ValueError.
        """
        line = {"rank": self.rank, **record}
        if line["rank"] != self.rank:
            raise ValueError(f"record of rank {line['rank']} written to rank {self.rank}'s log")
        missing = [k for k in RECORD_KEYS if k not in line]
        if missing:
            raise ValueError(f"step record misses {', '.join(missing)}")
        line.setdefault("peak_memory_bytes", None)
        line.setdefault("timed", True)
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> StepLogWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class StepLogReader:
    """Follows the logs of a directory: each :meth:`read_new` returns only the records written
    since the previous call (cheap enough to call several times a second).

    A last line still being written (no newline yet) is kept back until it is complete; a
    complete line that is not a JSON object is skipped.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[int, int] = {}

    def read_new(self) -> dict[int, list[dict[str, Any]]]:
        """New records by rank (ranks without new records are left out)."""
        out: dict[int, list[dict[str, Any]]] = {}
        for rank, path in _log_files(self.directory):
            data, self._offsets[rank] = complete_lines(path, self._offsets.get(rank, 0))
            records = _parse_lines(data)
            if records:
                out[rank] = records
        return out


def complete_lines(path: Path, offset: int) -> tuple[bytes, int]:
    """The complete lines of ``path`` written after byte ``offset``, and the offset after
    them: a last line still being written (no newline yet) is left for the next call; an
    unreadable file gives nothing."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return b"", offset
    end = data.rfind(b"\n") + 1  # 0 when no line is complete yet
    return data[:end], offset + end


def read_records(directory: Path) -> dict[int, list[dict[str, Any]]]:
    """Every rank's records so far, by rank (in the order written); {} if there are none.

    Lines that do not parse (a last line being written) are skipped.
    """
    out: dict[int, list[dict[str, Any]]] = {}
    for rank, path in _log_files(directory):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        out[rank] = _parse_lines(data)
    return out


@dataclass(frozen=True, kw_only=True)
class StepSummary:
    """One step of the whole run: the ranks' records added up."""

    step: int
    loss: float | None
    """Sum of the last-stage ranks' losses (the global-batch mean); None if none has one."""
    iteration_s: float
    """The slowest rank's step time."""
    samples: int
    """Samples of the step (the global batch)."""
    samples_per_s: float | None
    """``samples / iteration_s``; None for a zero time."""
    timed: bool
    """False if any rank reported the step as a warm-up step."""
    ranks: list[dict[str, Any]]
    """Per rank, by rank: ``rank``, ``step_s``, ``peak_memory_bytes``."""


def complete_steps(
    records_by_rank: Mapping[int, Iterable[Mapping[str, Any]]], world_size: int | Sequence[int]
) -> list[StepSummary]:
    """Summaries of the steps for which every rank ``0..world_size-1`` (or every rank of a
    list: this node's, on several nodes) has a record, by step.

    Where a rank has several records of one step (a run resumed into the same directory), its
    last one counts. Records of other ranks are ignored.
    """
    wanted = list(range(world_size)) if isinstance(world_size, int) else list(world_size)
    by_step: dict[int, dict[int, Mapping[str, Any]]] = {}
    for rank in wanted:
        for record in records_by_rank.get(rank, ()):
            by_step.setdefault(int(record["step"]), {})[rank] = record
    return [
        _summarise(step, [ranks[r] for r in wanted])
        for step, ranks in sorted(by_step.items())
        if len(ranks) == len(wanted)
    ]


def merge(directory: Path, world_size: int | Sequence[int], out_path: Path) -> int:
    """Write one JSON line per complete step (a :class:`StepSummary`) to ``out_path``
    atomically, creating its folder; return the number of lines."""
    summaries = complete_steps(read_records(directory), world_size)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_path, "".join(json.dumps(asdict(s)) + "\n" for s in summaries))
    return len(summaries)


@dataclass(frozen=True, kw_only=True)
class Progress:
    """How far a run has got, from its complete steps."""

    done: int
    """Complete steps."""
    total: int
    loss: float | None
    """The last complete step's loss."""
    step_s: float | None
    """Median iteration time of the last (up to 5) complete steps; None before the first."""
    samples_per_s: float | None
    """The last step's samples over ``step_s``."""
    eta_s: float | None
    """``(total - done) * step_s``; None before the first step."""


def progress_of(summaries: Iterable[StepSummary], total_steps: int) -> Progress:
    """The progress of a run of ``total_steps`` steps that has completed ``summaries``."""
    steps = sorted(summaries, key=lambda s: s.step)
    if not steps:
        return Progress(
            done=0, total=total_steps, loss=None, step_s=None, samples_per_s=None, eta_s=None
        )
    last = steps[-1]
    step_s = statistics.median(s.iteration_s for s in steps[-RATE_WINDOW:])
    return Progress(
        done=len(steps),
        total=total_steps,
        loss=last.loss,
        step_s=step_s,
        samples_per_s=last.samples / step_s if step_s > 0 else None,
        eta_s=max(total_steps - len(steps), 0) * step_s,
    )


def _summarise(step: int, records: list[Mapping[str, Any]]) -> StepSummary:
    losses = [float(r["loss"]) for r in records if r.get("loss") is not None]
    iteration_s = max(float(r["step_s"]) for r in records)
    samples = sum(int(r.get("samples", 0)) for r in records)
    return StepSummary(
        step=step,
        loss=sum(losses) if losses else None,
        iteration_s=iteration_s,
        samples=samples,
        samples_per_s=samples / iteration_s if iteration_s > 0 else None,
        timed=all(bool(r.get("timed", True)) for r in records),
        ranks=[
            {
                "rank": int(r["rank"]),
                "step_s": float(r["step_s"]),
                "peak_memory_bytes": r.get("peak_memory_bytes"),
                "energy_j": r.get("energy_j"),
            }
            for r in records
        ],
    )


def _log_files(directory: Path) -> list[tuple[int, Path]]:
    """(rank, path) of the logs in ``directory``, by rank."""
    out = []
    for path in directory.glob(f"{FILE_PREFIX}*{FILE_SUFFIX}"):
        rank = path.name[len(FILE_PREFIX) : -len(FILE_SUFFIX)]
        if rank.isdigit():
            out.append((int(rank), path))
    return sorted(out)


def _parse_lines(data: bytes) -> list[dict[str, Any]]:
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:  # JSONDecodeError: a line being written
            continue
        if isinstance(record, dict) and "step" in record:
            out.append(record)
    return out
