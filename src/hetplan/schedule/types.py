"""Schedules as data: the one representation the simulator, the executor and the Gantt chart use.

A :class:`Schedule` is a flat list of :class:`Action` s in a topological order. Each action
names the *resources* it occupies for its whole duration:

- ``compute:<device>``: the device's compute stream (forward, backward, optimizer step);
- ``link:<src>><dst>``: one direction of the link between two devices (point-to-point sends);
- ``comm:<device>``: the device's communication stream, used by collectives (allreduce,
  parameter-server push/pull). A collective occupies the comm streams of *all* its participants,
  so two collectives sharing a device run one after the other (as NCCL/gloo run the collectives
  of one process group in issue order), while compute on those devices goes on in parallel.

Every resource runs its actions one at a time, in the order in which they appear in the
schedule (:attr:`Schedule.actions`), which the builder makes consistent with the dependencies.
The per-device view (:meth:`Schedule.per_device`) lists, for each device, the actions touching
it: what an executor runs on that rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ActionKind = Literal["fwd", "bwd", "send", "allreduce", "ps_push", "ps_pull", "optimizer"]
COLLECTIVE_KINDS: frozenset[str] = frozenset({"allreduce", "ps_push", "ps_pull"})


def compute_res(device: str) -> str:
    """Name of a device's compute stream."""
    return f"compute:{device}"


def comm_res(device: str) -> str:
    """Name of a device's communication stream (collectives)."""
    return f"comm:{device}"


def link_res(src: str, dst: str) -> str:
    """Name of one direction of the link ``src -> dst``."""
    return f"link:{src}>{dst}"


def res_devices(resource: str) -> tuple[str, ...]:
    """Devices a resource belongs to (both ends for a link)."""
    kind, _, rest = resource.partition(":")
    if kind == "link":
        src, _, dst = rest.partition(">")
        return (src, dst)
    return (rest,)


@dataclass(slots=True, kw_only=True)
class Action:
    """One operation of a schedule. Treat as immutable (not frozen only because frozen
    dataclasses cost 5x more to create, and big schedules have tens of thousands of actions).

    ``stage`` and ``microbatch`` are -1 where they do not apply (e.g. an optimizer step spans all
    micro-batches). ``part`` numbers the pieces of a backward split at gradient-bucket
    boundaries and the buckets of a collective (-1 = not split).
    """

    kind: ActionKind
    device: str
    """Main device (the sender for a send, the first participant for a collective)."""
    resources: tuple[str, ...]
    duration_s: float
    stage: int = -1
    microbatch: int = -1
    pipeline: int = 0
    """Replica (virtual worker) index."""
    iteration: int = 0
    """Iteration or wave index (steady-state schedules simulate several)."""
    part: int = -1
    peer: str | None = None
    """Receiver of a send."""
    nbytes: float = 0.0
    """Bytes moved (communication actions)."""
    deps: tuple[int, ...] = ()
    """Indices (into :attr:`Schedule.actions`) of the actions that must end before this starts."""

    @property
    def label(self) -> str:
        """Short grid label: ``F3`` forward of micro-batch 3, ``B3.1`` its backward part 1, ..."""
        mb = "" if self.microbatch < 0 else str(self.microbatch)
        part = "" if self.part < 0 else f".{self.part}"
        prefix = {
            "fwd": "F",
            "bwd": "B",
            "send": "S",
            "allreduce": "AR",
            "ps_push": "PU",
            "ps_pull": "PL",
            "optimizer": "OPT",
        }[self.kind]
        if self.kind in COLLECTIVE_KINDS:
            return f"{prefix}{self.stage if self.stage >= 0 else ''}{part}"
        return f"{prefix}{mb}{part}"


@dataclass(frozen=True, slots=True, kw_only=True)
class RateMark:
    """Throughput measurement: ``samples`` finish between the ends of two actions.

    ``start`` is an action index or -1 for time zero; ``end`` an action index.
    """

    start: int
    end: int
    samples: float


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """A complete schedule: actions in topological order plus how to read the timeline."""

    strategy: str
    actions: tuple[Action, ...]
    devices: tuple[str, ...]
    """Every device that appears, in plan order (grid rows)."""
    samples_per_iteration: int
    """Samples per optimizer step (the global batch)."""
    resource_names: tuple[str, ...] = ()
    """Every resource, numbered: ``action_resources[i]`` holds ids into this tuple."""
    action_resources: tuple[tuple[int, ...], ...] = ()
    """Resource ids of each action (same order as ``actions``); filled by the builder."""
    marks: tuple[RateMark, ...] = ()
    """Where to measure throughput. Empty: one iteration from time 0 to the last action end.
    Steady-state schedules (asynchronous PipeDream, WSP, asynchronous PS) simulate several
    iterations and mark a window past the warm-up; throughput is the sum over marks of
    samples / (end - start)."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def per_device(self) -> dict[str, list[tuple[int, Action]]]:
        """For each device, the (index, action) pairs touching it, in schedule order.

        A send appears on both its sender and its receiver (the receiver's is a ``recv``).
        """
        out: dict[str, list[tuple[int, Action]]] = {d: [] for d in self.devices}
        for i, act in enumerate(self.actions):
            seen: set[str] = set()
            for res in act.resources:
                for dev in res_devices(res):
                    if dev not in seen:
                        seen.add(dev)
                        out.setdefault(dev, []).append((i, act))
        return out
