"""What a sharded data-parallel rank holds and moves (issue 29), against a hand count and
against torch's own FSDP2 on 3 gloo processes (the real shards and collectives)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from hetplan.cost.sharded import (
    Tensor,
    gathered_pass,
    group_gathered_bytes,
    group_shard_bytes,
    layer_tensors,
    local_rows,
    local_shard_bytes,
    rank_memory,
    sent_bytes_per_rank,
    step_traffic,
)
from hetplan.graph.types import LayerInfo

# nn.Linear(7, 5) and nn.Linear(5, 3) in fp32: weight rows are out_features.
L1 = [Tensor(nbytes=5 * 7 * 4, rows=5), Tensor(nbytes=5 * 4, rows=5)]
L2 = [Tensor(nbytes=3 * 5 * 4, rows=3), Tensor(nbytes=3 * 4, rows=3)]


def test_shards_follow_torch_chunk_by_hand() -> None:
    # 5 rows on 3 ranks: torch.chunk gives 2, 2, 1; every rank stores 2 (padded).
    assert [local_rows(5, 3, r) for r in range(3)] == [2, 2, 1]
    # 2 rows on 3 ranks: chunks of 1, the third rank owns nothing.
    assert [local_rows(2, 3, r) for r in range(3)] == [1, 1, 0]
    assert group_shard_bytes(L1, 3) == 2 * 28 + 2 * 4  # 64
    assert group_shard_bytes(L2, 3) == 1 * 20 + 1 * 4  # 24
    assert group_gathered_bytes(L1, 3) == 192
    assert local_shard_bytes(L1[0], 3, 2) == 28  # one row of 7 fp32


def test_step_traffic_and_ring_bytes_by_hand() -> None:
    z3 = step_traffic([L1, L2], 3, stage=3)
    assert [(g.all_gathers, g.gathered_bytes, g.reduce_scatter_bytes) for g in z3] == [
        (2, 192, 192),
        (2, 72, 72),
    ]
    # a ring moves (n-1)/n of each collective's buffer out of every rank: 2/3 x (3 x 264)
    assert sent_bytes_per_rank(z3, 3) == pytest.approx(2 / 3 * 3 * 264)
    z2 = step_traffic([L1, L2], 3, stage=2, grad_scale=2.0)
    assert [(g.all_gathers, g.reduce_scatter_bytes) for g in z2] == [(1, 384), (1, 144)]
    assert sent_bytes_per_rank(z3, 1) == 0.0


def test_rank_memory_by_hand() -> None:
    # Adam, fp32: two fp32 slots per parameter byte-for-byte (2 bytes of state per byte).
    m = rank_memory([L1, L2], 3, 2, stage=3, state_bytes_per_param_byte=2.0)
    assert m.weights == 64 + 24
    assert m.optimizer == 2.0 * (1 * 28 + 1 * 4 + 1 * 20 + 1 * 4)  # rank 2's own rows
    # The backward differentiates L2 first (72 + the prefetched L1's 192 gathered, 72 whole
    # gradients: 336 beside the shards), then L1: 192 gathered, its 192 whole gradients,
    # L2's kept reduce-scatter input 72 and L2's gradient shard 24 = 480, the peak.
    assert m.gathered == 192  # nothing before L1 to prefetch
    assert m.unsharded_grads == 192 + 72
    assert m.grads == 24
    assert m.total == 88 + 24 + m.optimizer + 192 + 264
    z2 = rank_memory([L1, L2], 3, 0, stage=2, state_bytes_per_param_byte=2.0)
    assert z2.gathered == 192 + 72 and z2.weights == 88  # everything gathered throughout
    assert z2.unsharded_grads == 192 + 72 and z2.grads == 24


def test_layer_tensors_reads_rows_and_falls_back_without_them() -> None:
    def info(rows: tuple[int, ...]) -> LayerInfo:
        return LayerInfo(
            name="l", fwd_flops=0.0, bwd_flops=0.0, params=40, param_bytes=160, out_bytes=0,
            saved_bytes=0, fwd_io_bytes=0, bwd_io_bytes=0, param_tensor_bytes=(140, 20),
            param_tensor_rows=rows,
        )  # fmt: skip

    assert layer_tensors(info((5, 5))) == L1
    old = info(())
    assert layer_tensors(old) == [Tensor(140, 140), Tensor(20, 20)]  # no padding assumed


WORKER = textwrap.dedent(
    """
    import json, sys
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch.distributed.fsdp import fully_shard

    def run(rank, world, store, out):
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world)
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.ReLU(),
                                    torch.nn.Linear(5, 3))
        for layer in (model[0], model[2]):
            fully_shard(layer)
        fully_shard(model)
        calls = []
        ag, rs = dist.all_gather_single, dist.reduce_scatter_single
        def all_gather(output, input, *a, **k):
            calls.append(["ag", output.numel() * output.element_size()])
            return ag(output, input, *a, **k)
        def reduce_scatter(output, input, *a, **k):
            calls.append(["rs", input.numel() * input.element_size()])
            return rs(output, input, *a, **k)
        dist.all_gather_single, dist.reduce_scatter_single = all_gather, reduce_scatter
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 7)).sum().backward()
        opt.step()
        stored = [m._get_fsdp_state()._fsdp_param_group.fsdp_params for m in (model[0], model[2])]
        shards = [sum(p._sharded_param_data.numel() * 4 for p in g) for g in stored]
        state = sum(s["exp_avg"].to_local().numel() * 4 + s["exp_avg_sq"].to_local().numel() * 4
                    for s in opt.state.values())
        with open(f"{out}.{rank}", "w") as f:
            json.dump({"calls": calls, "shards": shards, "state": state}, f)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(3, sys.argv[1], sys.argv[2]), nprocs=3)
    """
)


@pytest.mark.slow  # three real gloo processes
def test_against_torch_fsdp2_on_three_gloo_ranks(gloo_worker) -> None:
    if not hasattr(torch.distributed, "all_gather_single"):
        pytest.skip("this torch's FSDP2 calls other collectives (torch 2.13 is pinned)")
    traffic = step_traffic([L1, L2], 3, stage=3)
    expected = sorted(
        [("ag", g.gathered_bytes) for g in traffic for _ in range(g.all_gathers)]
        + [("rs", g.reduce_scatter_bytes) for g in traffic]
    )
    for rank, got in enumerate(gloo_worker(WORKER, 3)):
        assert sorted((k, b) for k, b in got["calls"]) == expected
        assert got["shards"] == [group_shard_bytes(L1, 3), group_shard_bytes(L2, 3)]
        mem = rank_memory([L1, L2], 3, rank, stage=3, state_bytes_per_param_byte=2.0)
        assert got["state"] == mem.optimizer


def test_gathered_pass_by_hand() -> None:
    # compute 2, 2, 2; gathers 1, 1, 1: only the first gather shows.
    assert gathered_pass([2, 2, 2], [1, 1, 1]) == 7
    # gathers 3 each outlast compute 1: comm bound, 3 + 3 + 3 then the last compute.
    assert gathered_pass([1, 1, 1], [3, 3, 3]) == 10
    # backward with scatters: AG0=1 | C0 1-3, AG1 1-2 | C1 3-5, RS0 3-4 | C2 5-7? AG2 issued
    # at 3 after RS0 -> 4-5 | C2 5-7, RS1 5-6, RS2 7-8.
    assert gathered_pass([2, 2, 2], [1, 1, 1], [1, 1, 1]) == 8
    # serial on CPU cores: the sum.
    assert gathered_pass([2, 2, 2], [1, 1, 1], [1, 1, 1], overlap=False) == 12
    assert gathered_pass([], []) == 0.0
