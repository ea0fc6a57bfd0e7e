"""The emission of one replica's actions, in each stage's order (:mod:`hetplan.planspec.order`).

Asynchronous PipeDream and WSP run the 1F1B order over a continuous stream of micro-batches that
spans several iterations (no flush); :func:`insert_optimizer` places each iteration's optimizer
step in it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from hetplan.planspec.order import Op, Order, stage_order
from hetplan.schedule.builder import ScheduleBuilder
from hetplan.schedule.types import Action, compute_res, link_res
from hetplan.schedule.work import CutWork, PipelineWork, StageWork


def insert_optimizer(ops: list[Op], m: int, lag: int | None) -> list[Op]:
    """Place each iteration's optimizer step ``("O", w)`` in a stage's compute order.

    ``lag`` None: right after the iteration's last backward (synchronous, PipeDream). ``lag`` =
    D + 1 (WSP): just before the first forward of iteration ``w + lag``, where the synchronised
    weights of wave ``w`` are first needed, but never before the wave's last backward (with
    continuous 1F1B a stage's warm-up forwards of the next wave precede that backward; they run
    on the previous weights, as PipeDream's weight stashing allows). Steps left over go last.
    """
    if lag is None:
        out: list[Op] = []
        for kind, j in ops:
            out.append((kind, j))
            if kind == "B" and j % m == m - 1:
                out.append(("O", j // m))
        return out
    out = []
    pending: list[int] = []  # waves whose last backward has run but whose step has not
    for kind, j in ops:
        if kind == "F" and j % m == 0:
            wave = j // m
            while pending and pending[0] + lag <= wave:
                out.append(("O", pending.pop(0)))
        out.append((kind, j))
        if kind == "B" and j % m == m - 1:
            pending.append(j // m)
            while pending and pending[0] + lag <= _next_wave(out, m):
                out.append(("O", pending.pop(0)))
    out.extend(("O", w) for w in pending)
    return out


def _next_wave(done: list[Op], m: int) -> int:
    """The wave of the next forward to run after ``done`` (waves whose forwards all ran)."""
    for kind, j in reversed(done):
        if kind == "F":
            return j // m + 1 if j % m == m - 1 else j // m
    return 0


def bwd_key(r: int, s: int, j: int, last_part: int) -> tuple[Hashable, ...]:
    """Key of the action that completes the backward of micro-batch ``j`` on stage ``s``."""
    return ("B", r, s, j, last_part)


def emit_replica(
    b: ScheduleBuilder,
    r: int,
    pipe: PipelineWork,
    *,
    m: int,
    iterations: int,
    order: Order,
    opt_lag: int | None,
    opt_deps: dict[tuple[int, int], list[Hashable]],
) -> None:
    """Add replica ``r``'s forwards, backwards, sends and optimizer steps to ``b``.

    ``opt_deps[(s, w)]``: extra dependencies of stage ``s``'s optimizer step of iteration ``w``
    (the gradient allreduce); without an entry it waits for the stage's last backward only.
    """
    num = len(pipe.stages)
    n = m * iterations
    for s, st in enumerate(pipe.stages):
        ctx = _context(r, s, m, pipe)
        ops = insert_optimizer(stage_order(order, s, num, n), m, opt_lag)
        for kind, j in ops:
            if kind == "F":
                _emit_fwd(b, ctx, j)
            elif kind == "B":
                _emit_bwd(b, ctx, j)
            else:
                last = bwd_key(r, s, j * m + m - 1, len(st.parts) - 1)
                b.add_action(
                    ("O", r, s, j),
                    [last, *opt_deps.get((s, j), [])],
                    Action(
                        kind="optimizer",
                        device=st.devices[0],
                        resources=ctx.compute,
                        duration_s=st.opt_s,
                        stage=s,
                        pipeline=r,
                        iteration=j,
                    ),
                )


class _Ctx(NamedTuple):
    """What every action of one stage of one replica shares (computed once per stage)."""

    r: int
    s: int
    m: int
    num: int
    st: StageWork
    compute: tuple[str, ...]
    fwd_link: tuple[str, ...]
    bwd_link: tuple[str, ...]
    fwd_held: tuple[str, ...]
    bwd_held: tuple[str, ...]
    next_dev: str | None
    prev_dev: str | None
    cut_fwd: CutWork
    cut_bwd: CutWork


def _held(peer: StageWork | None, st: StageWork) -> tuple[str, ...]:
    """Compute streams a transfer between ``st`` and ``peer`` holds besides its links: those
    of the ends that copy their own messages (CPU stages, ``StageWork.on_cores``)."""
    ends = (st,) if peer is None else (st, peer)
    return tuple(compute_res(d) for w in ends if w.on_cores for d in w.devices)


def _context(r: int, s: int, m: int, pipe: PipelineWork) -> _Ctx:
    st = pipe.stages[s]
    num = len(pipe.stages)
    nxt = pipe.stages[s + 1].devices if s + 1 < num else ()
    prev = pipe.stages[s - 1].devices if s > 0 else ()
    return _Ctx(
        r=r,
        s=s,
        m=m,
        num=num,
        st=st,
        compute=tuple(compute_res(d) for d in st.devices),
        fwd_link=tuple(link_res(a, c) for a, c in zip(st.devices, nxt, strict=False)),
        bwd_link=tuple(link_res(a, c) for a, c in zip(st.devices, prev, strict=False)),
        fwd_held=_held(pipe.stages[s + 1] if s + 1 < num else None, st),
        bwd_held=_held(pipe.stages[s - 1] if s > 0 else None, st),
        next_dev=nxt[0] if nxt else None,
        prev_dev=prev[0] if prev else None,
        cut_fwd=pipe.cut(s),
        cut_bwd=pipe.cut(s - 1) if s > 0 else CutWork(fwd_s=0.0, bwd_s=0.0),
    )


def _emit_fwd(b: ScheduleBuilder, c: _Ctx, j: int) -> None:
    r, s, st = c.r, c.s, c.st
    deps: list[Hashable] = [("SF", r, s - 1, j)] if s > 0 else []
    it = j // c.m
    dev = st.devices[0]
    b.add_action(
        ("F", r, s, j),
        deps,
        Action(
            kind="fwd",
            device=dev,
            resources=c.compute,
            duration_s=st.fwd_s,
            stage=s,
            microbatch=j,
            pipeline=r,
            iteration=it,
        ),
    )
    if c.next_dev is not None:
        _emit_send(b, c, ("SF", r, s, j), ("F", r, s, j), j, forward=True)


def _emit_bwd(b: ScheduleBuilder, c: _Ctx, j: int) -> None:
    r, s, st = c.r, c.s, c.st
    first: Hashable = ("F", r, s, j) if s == c.num - 1 else ("SB", r, s + 1, j)
    parts = st.parts if j % c.m == c.m - 1 else (st.bwd_s,)
    it = j // c.m
    dev = st.devices[0]
    split = len(parts) > 1
    for k, dur in enumerate(parts):
        deps: list[Hashable] = [first, ("F", r, s, j)] if k == 0 else [("B", r, s, j, k - 1)]
        b.add_action(
            ("B", r, s, j, k),
            deps,
            Action(
                kind="bwd",
                device=dev,
                resources=c.compute,
                duration_s=dur,
                stage=s,
                microbatch=j,
                pipeline=r,
                iteration=it,
                part=k if split else -1,
            ),
        )
    if c.prev_dev is not None:
        _emit_send(b, c, ("SB", r, s, j), ("B", r, s, j, len(parts) - 1), j, forward=False)


def _emit_send(
    b: ScheduleBuilder, c: _Ctx, key: Hashable, after: Hashable, j: int, *, forward: bool
) -> None:
    """Micro-batch ``j``'s activations to the next stage (``forward``) or its gradients to the
    previous one, once ``after`` is done."""
    cut = c.cut_fwd if forward else c.cut_bwd
    b.add_action(
        key,
        [after],
        Action(
            kind="send",
            device=c.st.devices[0],
            peer=c.next_dev if forward else c.prev_dev,
            resources=c.fwd_link if forward else c.bwd_link,
            duration_s=cut.fwd_s if forward else cut.bwd_s,
            nbytes=cut.nbytes,
            stage=c.s,
            microbatch=j,
            pipeline=c.r,
            iteration=j // c.m,
        ),
        c.fwd_held if forward else c.bwd_held,
    )
