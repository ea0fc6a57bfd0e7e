"""Set up one rank: its stage program, only its parameters, its actions, its gradient sync.

1. The whole model is built on the meta device (no memory) and cut into the plan's stages
   (:mod:`hetplan.graph.split`).
2. Only the parameters and buffers the rank's stage reads are materialised on its device
   (:meth:`hetplan.run.setup.model.ModelSource.build_part`), with the values the single-process
   reference gets.
3. The rank's action list comes from the plan's schedule
   (:mod:`hetplan.schedule.plan_schedule`), with the gradient buckets of the real parameters;
   hybrid and data-parallel stages sync them over the stage's group
   (:mod:`hetplan.run.execute.gradsync`).
4. The values crossing each cut are described once by a real forward of one micro-batch, run
   stage after stage (state and RNG restored afterwards).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hetplan.graph.split import SplitProgram, split_program, stage_state
from hetplan.graph.tp_units import TpLayout
from hetplan.planspec import Plan
from hetplan.planspec.strategies import spec_of
from hetplan.run.execute import p2p
from hetplan.run.execute.executor import StageIO
from hetplan.run.execute.gradsync import BucketSync, Recorder, TieSync
from hetplan.run.execute.ps import hosted_params
from hetplan.run.execute.window import WaveSync
from hetplan.run.setup.layout import RankRole, pipeline_ranks, stage_ranks, tp_ranks
from hetplan.run.setup.model import ModelSource, canonical_names
from hetplan.run.setup.precision import autocast
from hetplan.run.setup.sharding import fill_shards, shard_stage
from hetplan.run.setup.tensor_parallel import local, local_bytes, mesh_of, parallelize_stage
from hetplan.schedule.plan_schedule import device_actions, execution_schedule
from hetplan.schedule.types import Action
from hetplan.units import MiB


class Groups:
    """The data-parallel group of every stage (one rank per pipeline); every rank creates all
    of them in the same order, as torch.distributed requires."""

    def __init__(self, plan: Plan, rank: int, world: int, timeout_s: float) -> None:
        timeout = timedelta(seconds=timeout_s)
        self.world: Any = dist.new_group(list(range(world)), timeout=timeout)
        self.stage: Any = None
        # Tied-weight messages travel apart from the pipeline's (NCCL matches by order).
        self.ties: Any = dist.new_group(list(range(world)), timeout=timeout)
        # Control messages (checkpoint planning, trial decisions) are small CPU objects: gloo
        # carries them whatever the training backend.
        self.control: Any = dist.new_group(list(range(world)), timeout=timeout, backend="gloo")
        self.ps: tuple[Any, Any] | None = None
        if spec_of(plan).executor(plan) == "ps-async":  # pushes up, weights down (server threads)
            up = dist.new_group(list(range(world)), timeout=timeout, backend="gloo")
            self.ps = (up, dist.new_group(list(range(world)), timeout=timeout, backend="gloo"))
        if len(plan.pipelines) > 1:
            for ranks in stage_ranks(plan):
                group = dist.new_group(ranks, timeout=timeout)
                if rank in ranks:
                    self.stage = group
        self.tp: Any = None
        """The stage's tensor-parallel group (tp > 1)."""
        if plan.tp > 1:
            for ranks in tp_ranks(plan):
                group = dist.new_group(ranks, timeout=timeout)
                if rank in ranks:
                    self.tp = group


@dataclass(kw_only=True)
class RankSetup:
    module: nn.Module
    """The rank's stage program (parameter names are the model's FQNs)."""
    io: StageIO
    actions: list[Action]
    layer_params: list[list[nn.Parameter]]
    """The stage's gradient tensors by layer, as the bucket assignment takes them."""
    ties: TieSync | None
    canonical: dict[str, str]
    """Stage parameter name -> the model's ``named_parameters()`` name (tied weights)."""
    held_bytes: int
    """Bytes of parameters and buffers this rank materialised (the rest stayed on meta)."""
    tensor_bytes: list[list[list[int]]]
    """Per stage and layer, the gradient tensors' bytes (the schedule's bucket structure)."""
    sharded_logits: bool = False
    """The stage computes vocabulary-split logits: its loss runs under ``loss_parallel()``."""

    def window_actions(self, plan: Plan, steps: int) -> list[Action]:
        """This rank's actions for ``steps`` iterations of a windowed plan."""
        schedule = execution_schedule(plan, self.tensor_bytes, steps)
        return device_actions(schedule, self.io.me)


def stage_layers(plan: Plan, pipeline: int) -> list[list[str]]:
    return [list(st.layers) for st in plan.pipelines[pipeline].stages]


def owned_params(
    model: nn.Module, stages: list[list[str]], reads: list[list[str]]
) -> list[list[list[str]]]:
    """Per stage and layer, the parameter FQNs the layer owns: trainable, in registration order,
    a tensor shared by several layers owned by the first to run (the graph's rule). A parameter
    outside every layer (read by glue code) belongs to the first layer of the first stage that
    reads it (``reads[s]``: the FQNs stage ``s`` reads), as the graph counts it in a first
    layer; that is also the owner of a weight tied across stages (:class:`TieSync`)."""
    params = dict(model.named_parameters(remove_duplicate=False))
    seen: set[int] = set()
    out: list[list[list[str]]] = []
    for layers, names in zip(stages, reads, strict=True):
        per_stage = []
        for layer in layers:
            mine = []
            for name, p in model.get_submodule(layer).named_parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    mine.append(f"{layer}.{name}")
            per_stage.append(mine)
        for name in names:
            p = params.get(name)
            if p is not None and p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                per_stage[0].append(name)
        out.append(per_stage)
    return out


def setup_rank(
    plan: Plan,
    role: RankRole,
    source: ModelSource,
    seed: int,
    device: str,
    tp: tuple[TpLayout, Any] | None = None,
    shard_group: Any = None,
) -> RankSetup:
    """Build the rank's stage and actions; ``tp``: the tensor-parallel layout and the stage's
    group, to split the stage over it (no other communication); ``shard_group``: the
    replicas' group a sharded plan (``fsdp``) shards the stage over
    (:mod:`hetplan.run.setup.sharding`)."""
    stages = stage_layers(plan, role.pipeline)
    meta = source.build_meta()
    meta_split = split_program(meta, stages)
    names = stage_state(meta, meta_split.stages[role.stage].state_names)
    # A sharded stage is built on meta and filled shard by shard (never a whole replica).
    root = (
        source.build_meta() if shard_group is not None else source.build_part(seed, device, names)
    )
    split = split_program(root, stages)
    module = split.stages[role.stage].module.train()
    sharded_logits = False
    layout = None
    if tp is not None:
        layout = tp[0]
        sharded_logits = parallelize_stage(root, stages[role.stage], layout, mesh_of(tp[1], device))
    if shard_group is not None:
        shard_stage(module, stages[role.stage], mesh_of(shard_group, device), zero=plan.zero)
        fill_shards(module, source, seed, device, shard_group)
    reads = [stage_state(meta, st.state_names) for st in meta_split.stages]
    owned = owned_params(meta, stages, reads)
    sharded = set(layout.sharded_params()) if layout is not None else set()
    # 4 B: gradients of fp32 master weights, whatever the autocast dtype.
    sizes = [
        [[local_bytes(meta.get_parameter(n).numel(), 4, n in sharded, plan.tp) for n in layer]
         for layer in st]
        for st in owned
    ]  # fmt: skip
    schedule = execution_schedule(plan, sizes)
    actions = device_actions(schedule, role.device)
    layer_params = [[module.get_parameter(n) for n in layer] for layer in owned[role.stage]]
    io = _io(plan, role)
    return RankSetup(
        module=module,
        io=io,
        actions=actions,
        layer_params=layer_params,
        ties=_ties(plan, role, split, module),
        canonical=canonical_names(meta),
        held_bytes=held_bytes(root),
        tensor_bytes=sizes,
        sharded_logits=sharded_logits,
    )


def one_stage_params(plan: Plan, model: nn.Module) -> list[list[str]]:
    """Per layer, the parameter FQNs a one-stage plan's worker owns (what a parameter server
    shards, in the order :func:`hetplan.run.execute.ps.hosted_params` assigns them)."""
    layers = [list(plan.pipelines[0].stages[0].layers)]
    reads = [stage_state(model, split_program(model, layers).stages[0].state_names)]
    return owned_params(model, layers, reads)[0]


def setup_server(
    plan: Plan, role: RankRole, source: ModelSource, seed: int, device: str
) -> RankSetup:
    """A server-only rank of a parameter server: only its shard's tensors materialised, the
    schedule's push as its action list."""
    meta = source.build_meta()
    owned = one_stage_params(plan, meta)
    names = {id(meta.get_parameter(n)): n for layer in owned for n in layer}
    meta_params = [[meta.get_parameter(n) for n in layer] for layer in owned]
    mine = [names[id(p)] for p in hosted_params(plan, meta_params).get(role.rank, [])]
    root = source.build_part(seed, device, mine)
    sizes = [[[meta.get_parameter(n).numel() * 4 for n in layer] for layer in owned]]
    io = StageIO(
        me=device, stage=-1, num_stages=1, prev_rank=None, next_rank=None, prev_device=None,
        next_device=None, tin=None, tout=None,
    )  # fmt: skip
    return RankSetup(
        module=root,
        io=io,
        actions=device_actions(execution_schedule(plan, sizes), role.device),
        layer_params=[[root.get_parameter(n) for n in layer] for layer in owned],
        ties=None,
        canonical=canonical_names(meta),
        held_bytes=held_bytes(root),
        tensor_bytes=sizes,
    )


def held_bytes(model: nn.Module) -> int:
    """Bytes of the model's real (not meta) parameters and buffers, each storage once."""
    seen: dict[tuple[str, int], int] = {}
    for t in [local(x) for x in (*model.parameters(), *model.buffers())]:
        if not t.is_meta:
            storage = t.untyped_storage()
            seen[(str(t.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def _io(plan: Plan, role: RankRole) -> StageIO:
    ranks = pipeline_ranks(plan, role.tp_rank)[role.pipeline]
    devs = plan.pipelines[role.pipeline].stages
    s, t = role.stage, role.tp_rank
    return StageIO(
        me=role.device,
        stage=s,
        num_stages=role.num_stages,
        prev_rank=ranks[s - 1] if s > 0 else None,
        next_rank=ranks[s + 1] if s + 1 < role.num_stages else None,
        prev_device=devs[s - 1].devices[t] if s > 0 else None,
        next_device=devs[s + 1].devices[t] if s + 1 < role.num_stages else None,
        tin=None,
        tout=None,
    )


def _ties(plan: Plan, role: RankRole, split: SplitProgram, module: nn.Module) -> TieSync | None:
    ranks = pipeline_ranks(plan, role.tp_rank)[role.pipeline]
    entries = []
    for i, where in enumerate(split.tie_names):
        if role.stage not in where:
            continue
        stages = sorted(where)
        owner = stages[0] == role.stage
        peers = [ranks[s] for s in stages[1:]] if owner else [ranks[stages[0]]]
        entries.append((i, where[role.stage], owner, peers))
    return TieSync(module, entries) if entries else None


def bucket_sync(
    setup: RankSetup, plan: Plan, groups: Groups, record: Recorder
) -> BucketSync | None:
    if groups.stage is None:
        return None
    return BucketSync(setup.layer_params, plan.bucket_mb * MiB, groups.stage, record)


def wave_sync(setup: RankSetup, plan: Plan, groups: Groups, record: Recorder) -> WaveSync | None:
    """The per-iteration gradient all-reduce of a windowed plan with replicas (WSP)."""
    if groups.stage is None:
        return None
    names = {id(p): n for n, p in setup.module.named_parameters()}
    layers = [
        [(names[id(p)], p.numel() * p.element_size()) for p in layer]
        for layer in setup.layer_params
    ]
    return WaveSync(layers, plan.bucket_mb * MiB, groups.stage, record)


@contextlib.contextmanager
def _preserved(module: nn.Module) -> Iterator[None]:
    """Run a throw-away forward: buffers (BatchNorm statistics) and RNG state restored."""
    buffers = [(b, b.detach().clone()) for b in module.buffers() if not b.is_meta]
    rng = torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        torch.set_rng_state(rng)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def exchange_templates(setup: RankSetup, sample: Any, device: str, dtype: str) -> StageIO:
    """Describe the values crossing each cut with one real micro-batch (``sample``: the first
    stage's input), run stage after stage."""
    io = setup.io
    tin = None
    if io.first:
        args: tuple[Any, ...] = (sample,)
    else:
        assert io.prev_rank is not None
        got: list[Any] = [None]
        dist.recv_object_list(got, src=io.prev_rank)
        tin = got[0]
        bufs, works = p2p.recv_values(tin, io.prev_rank, 0, device)
        for w in works:
            w.wait()
        args = p2p.assemble(tin, p2p.arrived(bufs, device))
    tout = None
    if not io.last:
        assert io.next_rank is not None
        with _preserved(setup.module), autocast(device, dtype):
            out = setup.module(*args)
        tout = p2p.template_of(out)
        dist.send_object_list([tout], dst=io.next_rank)
        for w in p2p.send_values(out, tout, io.next_rank, 0):
            w.wait()
    return dataclasses.replace(io, tin=tin, tout=tout)
