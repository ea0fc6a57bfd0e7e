"""Each rank builds only what it holds: the model is built on the meta device and a rank
materialises only the parameters and buffers its stage reads (real processes, gloo, CPU)."""

from __future__ import annotations

import torch
from test_run_fidelity import make_plan

from hetplan.graph.split import split_program, stage_state
from hetplan.run.setup.model import ZooSource, layer_names
from hetplan.run.train import run_plan


def _bytes(model: torch.nn.Module, names: list[str]) -> int:
    """Hand count: numel x 4 B (fp32) of each named tensor, a tied tensor once."""
    tensors = {**dict(model.named_parameters(remove_duplicate=False)),
               **dict(model.named_buffers(remove_duplicate=False))}  # fmt: skip
    unique = {id(tensors[n]): tensors[n] for n in names}
    return sum(t.numel() * 4 for t in unique.values())


def test_pipeline_ranks_hold_only_their_stage() -> None:
    plan = make_plan("gpt-tiny", "gpipe", 3, micro=2)
    raw = run_plan(plan, source=ZooSource(name="gpt-tiny"), steps=1)
    meta = ZooSource(name="gpt-tiny").build_meta()
    stages = [st.layers for st in plan.pipelines[0].stages]
    split = split_program(meta, stages)
    whole = _bytes(meta, [n for n, _ in meta.named_parameters()])
    assert layer_names(ZooSource(name="gpt-tiny"))[0] == "embed"
    for r in raw:
        names = stage_state(meta, split.stages[r.stage].state_names)
        assert r.held_state_bytes == _bytes(meta, names), f"rank {r.rank}"
        assert r.held_state_bytes < whole
    # the tied embedding is held by the first and the last stage, nothing else twice
    assert sum(r.held_state_bytes for r in raw) == whole + 1000 * 128 * 4
