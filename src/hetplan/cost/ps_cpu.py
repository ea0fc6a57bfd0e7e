"""The parameter server's own CPU work when its ranks are CPU processes (gloo on one host).

:mod:`hetplan.cost.comm_ps` prices the bytes on the links. What the runtime
(:mod:`hetplan.run.execute.ps`, :mod:`hetplan.run.execute.ps_async`) also does, on the ranks'
own cores, is build flat buffers and apply the pushed gradients:

- synchronous (``PsExecutor``): every rank, for every host ``h``, concatenates that shard's
  gradients into a new flat buffer before the ``reduce`` (``S_h`` bytes) and the shard's
  weights into the same buffer before the ``broadcast`` (a copy: the buffer is held); the
  host copies the summed shard back into its gradients (``S_own``), every rank copies each
  broadcast shard back into its weights.
  The workers wait in the collectives meanwhile: the work lengthens the push and the pull.
- asynchronous (``AsyncServer``): the worker concatenates each host's gradients with their
  tag into a new buffer and sends it; its pull receives each remote shard into a new buffer
  and copies it into its weights. Each host's *server thread*, in the worker's own process
  and so on its cores, applies every worker's push one at a time: the receiver's new buffer,
  a copy into the master tensors' gradients, the optimizer step on the shard, and two new
  buffers for the reply (the masters concatenated, then with the version appended). Per
  iteration a host applies one push per worker; that work takes turns with its own worker's
  compute (and its core-mates', :mod:`hetplan.predict.sharing`) and a pull waits for its
  push's application.

Each asynchronous push and pull reply is also one gloo message, and a message costs CPU on
both of its ranks beyond its bytes: the gloo TCP loop threads' wake-ups and system calls and
the Python threads that take it. Between ranks on different cores that is little; between
core-mates (two processes pinned to one core) the core is busy for the whole exchange, the
sender's and receiver's threads taking turns on it. Per iteration a worker sends a push to,
and receives a reply from, each other host; a host receives a push from, and sends a reply
to, each other worker. That CPU time sits with the server's work in the rank's optimizer slot
(a compute action, which its core-mates count when sharing the core).

A new buffer costs more than a copy into an existing one when it is large: glibc's
``malloc`` serves requests of at least ``MMAP_THRESHOLD_BYTES`` with a fresh ``mmap`` (its
dynamic threshold stops growing there), so each such buffer's pages are faulted in and zeroed
by the kernel on first write; smaller ones reuse the heap the previous step freed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from hetplan.units import MiB

# glibc's largest dynamic mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB,
# malloc/malloc.c): an allocation this large is always a fresh mapping. Seen on the 2-core
# machine: a new tensor of 30 MB fills at 7-12 GB/s, one of 37 MB at 1.7-1.9 GB/s
# (benchmarks/bench_cpu_copies.py, 2026-11-29).
MMAP_THRESHOLD_BYTES = 32 * MiB
# Copy into memory the process already holds (bytes/s, one core, speed 1):
# ``torch.cat(..., out=held)`` of 37 and 74 MB, one pinned thread, the other core idle or
# training vgg11: 6.0-7.0 GB/s in 8 runs, median 6.5 (benchmarks/bench_cpu_copies.py
# [--busy], 2026-11-29, load average 1.2-1.3). The 4 GB/s of 2026-11-25 was timed at load
# averages 4.8-11, where other jobs took part of the core: the speed share's business.
COPY_BANDWIDTH = 6.5e9
# Filling a freshly mapped buffer (bytes/s, one core, speed 1): the same runs' torch.cat and
# clone into new tensors of 37 and 74 MB, page faults included: 1.6-2.4 GB/s, median 1.9
# (the 1 GB/s of 2026-11-25 was timed at load averages 4.6-11, as above).
FRESH_BANDWIDTH = 1.9e9
# CPU seconds one gloo point-to-point message costs each of its two ranks (at speed 1), beyond
# its bytes. benchmarks/bench_gloo_message_cpu.py (2026-11-29, round trips of 1 and 20 KiB, the
# receiver taking each in a side thread as the server does; CPU time of every thread of both
# processes over the loop, per message, halved):
# - ranks on different cores (local-cpu, and local-cpu-4on2 re-pinned one per core): 98-311
#   us per message in 8 runs, median 160: 80 us a rank;
# - core-mates (local-cpu-4on2's ranks 0 and 1, both on core 0): 1792-1860 us in 6 runs, the
#   core busy throughout (CPU = wall): 0.9 ms a rank.
MESSAGE_CPU_S = 80e-6
MESSAGE_CPU_S_CORE_MATES = 0.9e-3

# The server thread's passes over a push beside the optimizer step (dimensionless): the
# receive into a new buffer, the copy into the masters' gradients, the two reply buffers.
SERVER_NEW_BUFFERS = 3
SERVER_COPIES = 1


def new_buffer_s(nbytes: float) -> float:
    """Speed-1 seconds to fill a new buffer of ``nbytes`` (fresh pages from the threshold)."""
    if nbytes <= 0:
        return 0.0
    bandwidth = FRESH_BANDWIDTH if nbytes >= MMAP_THRESHOLD_BYTES else COPY_BANDWIDTH
    return nbytes / bandwidth


def copy_s(nbytes: float) -> float:
    """Speed-1 seconds to copy ``nbytes`` into memory already held."""
    return max(nbytes, 0.0) / COPY_BANDWIDTH


@dataclass(frozen=True, kw_only=True)
class PsCpuWork:
    """CPU seconds (at each device's speed) the PS runtime adds per iteration."""

    push_s: dict[str, float]
    """Per worker: work inside its push (its buffers; synchronous: the host's copy-back)."""
    pull_s: dict[str, float]
    """Per worker: work inside its pull (its buffers and copies; asynchronous: the wait for
    its push's application at the slowest host)."""
    server_s: dict[str, float]
    """Per host (asynchronous): its server thread's work per iteration, every worker's push
    applied once (optimizer steps included)."""
    messages_s: dict[str, float] = field(default_factory=dict)
    """Per worker and host (asynchronous): the CPU its messages of an iteration cost it."""


def messages_cpu_s(
    hosts: Sequence[str],
    workers: Sequence[str],
    speeds: Mapping[str, float],
    core_mates: Callable[[str, str], bool],
) -> dict[str, float]:
    """Per rank, the CPU seconds (at its speed) of an asynchronous iteration's messages
    (module docstring): two per other host it pushes to as a worker, two per other worker it
    serves as a host, each :data:`MESSAGE_CPU_S_CORE_MATES` with a core-mate, else
    :data:`MESSAGE_CPU_S`."""

    def cost(a: str, b: str) -> float:
        return 2 * (MESSAGE_CPU_S_CORE_MATES if core_mates(a, b) else MESSAGE_CPU_S)

    out: dict[str, float] = {}
    for d in dict.fromkeys([*workers, *hosts]):
        total = sum(cost(d, h) for h in hosts if h != d) if d in workers else 0.0
        if d in hosts:
            total += sum(cost(d, w) for w in dict.fromkeys(workers) if w != d)
        out[d] = total / speeds[d]
    return out


def host_bytes(ps_devices: Sequence[str], shard_bytes: Sequence[int]) -> dict[str, float]:
    """Bytes each host device serves (the sum of its shards)."""
    out: dict[str, float] = {}
    for dev, nbytes in zip(ps_devices, shard_bytes, strict=True):
        out[dev] = out.get(dev, 0.0) + float(nbytes)
    return {d: b for d, b in out.items() if b > 0}


def ps_cpu_work(
    hosts: Mapping[str, float],
    workers: Sequence[str],
    speeds: Mapping[str, float],
    *,
    asynchronous: bool,
    optimizer_s: Mapping[str, float] | None = None,
    core_mates: Callable[[str, str], bool] | None = None,
) -> PsCpuWork:
    """The runtime's buffer and server work (module docstring), in seconds at ``speeds``.

    ``hosts``: bytes served per host device; ``optimizer_s``: per host, one optimizer step
    over its shard at speed 1 (asynchronous: the server steps once per push);
    ``core_mates``: whether two devices are pinned to the same cores (asynchronous: prices
    the messages, :func:`messages_cpu_s`; None: no messages priced). A host that is no worker
    has no optimizer slot: its messages join its server's work."""
    opt = optimizer_s or {}
    push: dict[str, float] = {}
    pull: dict[str, float] = {}
    server: dict[str, float] = {}
    if asynchronous:
        for h, nbytes in hosts.items():
            per_push = (
                SERVER_NEW_BUFFERS * new_buffer_s(nbytes)
                + SERVER_COPIES * copy_s(nbytes)
                + opt.get(h, 0.0)
            )
            server[h] = len(workers) * per_push / speeds[h]
        messages = messages_cpu_s(list(hosts), workers, speeds, core_mates) if core_mates else {}
        for h in hosts:
            if h not in workers:
                server[h] += messages.pop(h, 0.0)
        for w in dict.fromkeys(workers):
            remote = [b for h, b in hosts.items() if h != w]
            push[w] = sum(new_buffer_s(b) for b in hosts.values()) / speeds[w]
            mine = sum(new_buffer_s(b) for b in remote) + sum(copy_s(b) for b in hosts.values())
            # Its pull waits for its push's application at every host (servers in parallel).
            wait = max((server[h] / len(workers) for h in hosts), default=0.0)
            pull[w] = mine / speeds[w] + wait
        return PsCpuWork(push_s=push, pull_s=pull, server_s=server, messages_s=messages)
    for w in dict.fromkeys(workers):
        build = sum(new_buffer_s(b) for b in hosts.values())
        refill = sum(copy_s(b) for b in hosts.values())  # the push's buffers, held
        push[w] = (build + copy_s(hosts.get(w, 0.0))) / speeds[w]
        pull[w] = (refill + sum(copy_s(b) for b in hosts.values())) / speeds[w]
    return PsCpuWork(push_s=push, pull_s=pull, server_s=server)
