"""Tensor parallelism's per-layer model (``cost.tp``) counted by hand on gpt-tiny's graph.

gpt-tiny: h = 128, 4 heads, 64 tokens per sample, vocabulary 1000. At micro-batch b = 2 and
tp = 2, one all-reduce of ``b x s x h`` elements carries 2 * 64 * 128 = 16384 elements.
"""

from __future__ import annotations

import textwrap

import pytest

from hetplan.cost.comm import allreduce_time
from hetplan.cost.tp import (
    LOSS_PARALLEL_ALLREDUCES,
    TpTraffic,
    tp_comm_time,
    tp_comm_times,
    tp_output_share,
    tp_share,
    tp_splits,
    tp_traffic,
)
from hetplan.graph import build_graph
from hetplan.graph.types import ModelGraph

B, S, H, V = 2, 64, 128, 1000
ELEMS = B * S * H  # one b x s x h all-reduce


def _gpt(dtype: str = "fp32") -> ModelGraph:
    return build_graph("gpt-tiny", dtype=dtype)


def test_gpt_tiny_layers_carry_their_tp_structure() -> None:
    g = _gpt()
    facts = {
        x.name: (x.tp_units, x.tp_vocab, x.tp_split, x.tp_tokens, x.tp_hidden) for x in g.layers
    }
    assert facts == {
        "embed": (0, "embedding", V, S, H),
        "block0": (2, "", 4, S, H),  # attention + MLP; gcd(4 heads, 512 inner features)
        "block1": (2, "", 4, S, H),
        "block2": (2, "", 4, S, H),
        "block3": (2, "", 4, S, H),
        "head": (0, "head", V, S, H),
    }


def test_one_block_is_two_allreduces_forward_and_four_backward_fp32(make_cluster) -> None:
    # Forward: the attention's and the MLP's outputs; backward: the input gradient of q, k, v
    # and up, each reduced on its own by ColwiseParallel (the gloo test below counts them).
    block = _gpt().layers[1]
    traffic = tp_traffic(block, B, "fp32", 2)
    assert traffic == TpTraffic(fwd=(ELEMS * 4.0,) * 2, bwd=(ELEMS * 4.0,) * 4)
    cluster = make_cluster([2], overhead=2e-5)
    devices = ["n0.0", "n0.1"]
    one = allreduce_time(ELEMS * 4, devices, cluster)
    assert tp_comm_time(block, B, "fp32", devices, cluster) == pytest.approx((2 * one, 4 * one))


def test_block_backward_is_fp32_under_bf16_autocast() -> None:
    block = _gpt("bf16").layers[1]
    # Forward all-reduces in the compute dtype (2 B), backward ones fp32 (Q4 measurement).
    assert tp_traffic(block, B, "bf16", 2) == TpTraffic(
        fwd=(ELEMS * 2.0,) * 2, bwd=(ELEMS * 4.0,) * 4
    )


def test_vocabulary_parts() -> None:
    for dtype in ("fp32", "bf16"):
        g = _gpt(dtype)
        embed, head = g.layers[0], g.layers[-1]
        # The embedding: 1 fp32 all-reduce of its output forward, nothing backward.
        assert tp_traffic(embed, B, dtype, 2) == TpTraffic(fwd=(ELEMS * 4.0,), bwd=())
        # The head + loss_parallel: 3 all-reduces of one fp32 per token, not the logits
        # (b x s x V x 4 = 512000 B); backward, its input gradient.
        assert LOSS_PARALLEL_ALLREDUCES == 3
        assert tp_traffic(head, B, dtype, 2) == TpTraffic(
            fwd=(B * S * 4.0,) * 3, bwd=(ELEMS * 4.0,)
        )


def test_head_forward_is_three_small_allreduces(make_cluster) -> None:
    head = _gpt().layers[-1]
    cluster = make_cluster([2], overhead=1e-5)
    devices = ["n0.0", "n0.1"]
    fwd, bwd = tp_comm_time(head, B, "fp32", devices, cluster)
    assert fwd == pytest.approx(3 * allreduce_time(B * S * 4, devices, cluster))
    assert bwd == pytest.approx(allreduce_time(ELEMS * 4, devices, cluster))
    assert fwd < allreduce_time(B * S * V * 4, devices, cluster)


def test_shares_and_degrees() -> None:
    g = _gpt()
    embed, block, head = g.layers[0], g.layers[1], g.layers[-1]
    assert [tp_share(x, 2) for x in (embed, block, head)] == [0.5, 0.5, 0.5]
    assert tp_share(block, 4) == 0.25
    # 8 ranks cannot hold whole heads of 4: the block is replicated, with no communication;
    # 1000 vocabulary rows divide by 8: the vocabulary parts still split.
    assert not tp_splits(block, 8) and tp_share(block, 8) == 1.0
    assert tp_traffic(block, B, "fp32", 8) == TpTraffic()
    assert tp_splits(embed, 8)
    assert not tp_splits(block, 1)
    # The logits stay sharded, a block's output is whole on every rank.
    assert tp_output_share(head, 2) == 0.5
    assert tp_output_share(block, 2) == 1.0


def test_models_without_units_are_replicated() -> None:
    for name in ("resnet-tiny", "vgg11"):
        for layer in build_graph(name).layers:
            assert (layer.tp_units, layer.tp_vocab, layer.tp_split) == (0, "", 0)
            assert tp_share(layer, 2) == 1.0
            assert tp_traffic(layer, B, "fp32", 2) == TpTraffic()


def test_bert_attention_is_replicated_its_ffn_split() -> None:
    g = build_graph("bert-tiny")
    layer = g.layers[1]
    # nn.MultiheadAttention is no unit (replicated); the FFN is (512 inner features).
    assert (layer.tp_units, layer.tp_split, layer.tp_tokens, layer.tp_hidden) == (1, 512, 128, 128)
    one = 128 * 128 * 4.0  # 128 tokens x hidden 128, fp32, one sample
    assert tp_traffic(layer, 1, "fp32", 2) == TpTraffic(fwd=(one,), bwd=(one,))
    # The word embedding (30522 rows) splits at 2, not at 4; the classifier head is no vocab head.
    assert g.layers[0].tp_vocab == "embedding"
    assert tp_splits(g.layers[0], 2) and not tp_splits(g.layers[0], 4)
    assert g.layers[-1].tp_vocab == ""


def test_comm_times_per_layer_whatever_the_sequence_asked_before(make_cluster) -> None:
    """``tp_comm_times`` keeps the last tuple's layer keys: another sequence, a slice or a
    list, is priced as itself, and every layer as ``tp_comm_time`` prices it alone."""
    layers = _gpt().layers
    cluster = make_cluster([2], overhead=2e-5)
    devices = ["n0.0", "n0.1"]
    for seq in (layers, layers[4:], layers, list(layers[:2]), layers):
        fwd, bwd = tp_comm_times(seq, B, "fp32", devices, cluster)
        alone = [tp_comm_time(x, B, "fp32", devices, cluster) for x in seq]
        assert (fwd, bwd) == ([f for f, _ in alone], [b for _, b in alone])


WORKER = textwrap.dedent(
    """
    import json, sys, warnings
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from hetplan.graph.resolve import resolve_model
    from hetplan.graph.tp_units import tp_layout
    from hetplan.run.setup.tensor_parallel import parallelize_stage

    def run(rank, world, store, out):
        warnings.filterwarnings("ignore")
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world)
        torch.manual_seed(0)
        model = resolve_model("gpt-tiny").factory()
        names = [n for n, _ in model.named_children()]
        parallelize_stage(model, ["block0"], tp_layout(model, names, world),
                          init_device_mesh("cpu", (world,)))
        x = torch.randn(2, 64, 128, requires_grad=True)
        with CommDebugMode() as fwd:
            y = model.get_submodule("block0")(x)
        with CommDebugMode() as bwd:
            y.sum().backward()
        x.grad.sum().item()
        with open(f"{out}.{rank}", "w") as f:
            json.dump([fwd.get_total_counts(), bwd.get_total_counts()], f)
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(run, args=(2, sys.argv[1], sys.argv[2]), nprocs=2)
    """
)


@pytest.mark.slow  # two real gloo processes
def test_a_block_all_reduces_as_the_runtime_does_on_two_gloo_ranks(gloo_worker) -> None:
    # hetplan's own runtime splits gpt-tiny's block0 (parallelize_stage); torch's CommDebugMode
    # counts its all-reduces forward and backward.
    traffic = tp_traffic(_gpt().layers[1], B, "fp32", 2)
    for fwd, bwd in gloo_worker(WORKER, 2):
        assert (fwd, bwd) == (len(traffic.fwd), len(traffic.bwd)) == (2, 4)
