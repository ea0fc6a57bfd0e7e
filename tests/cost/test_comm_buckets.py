"""DDP buckets, Horovod fusion and the overlap of allreduce with backward."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetplan.cost.comm import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    GradBucket,
    ddp_buckets,
    fusion_buckets,
    horovod_worst_case_exposed,
    overlapped_allreduce_exposed,
    overlapped_allreduce_timeline,
    ring_allreduce_time,
)
from hetplan.units import MiB

M = int(MiB)
# Layer 0: weight 3 MiB + bias 0.5 MiB; layer 1: 2 MiB; layer 2: 0.75 MiB + 0.5 MiB.
LAYERS = [[3 * M, M // 2], [2 * M], [3 * M // 4, M // 2]]


def test_ddp_defaults_are_torch_defaults() -> None:
    import torch.distributed as dist

    assert DDP_FIRST_BUCKET_BYTES == dist._DEFAULT_FIRST_BUCKET_BYTES
    assert DDP_BUCKET_CAP_BYTES == 25 * 1024 * 1024


def test_ddp_buckets_by_hand() -> None:
    # Ready order: 0.5, 0.75 (layer 2) | 2 (layer 1), 0.5, 3 (layer 0).
    # First bucket closes at >= 1 MiB: 1.25 MiB; the next at >= 4 MiB: 2 + 0.5 + 3 = 5.5 MiB.
    got = ddp_buckets(LAYERS, cap_bytes=4 * M, first_bucket_bytes=M)
    assert got == [GradBucket(5 * M // 4, 2), GradBucket(11 * M // 2, 0)]
    # Cap 2 MiB: 1.25 | 2 (closes at exactly the cap) | 0.5 + 3.
    got = ddp_buckets(LAYERS, cap_bytes=2 * M, first_bucket_bytes=M)
    assert got == [GradBucket(5 * M // 4, 2), GradBucket(2 * M, 1), GradBucket(7 * M // 2, 0)]


def test_ddp_buckets_skip_parameterless_layers() -> None:
    got = ddp_buckets([[], [100], [], [200]], cap_bytes=1e9, first_bucket_bytes=150)
    assert got == [GradBucket(200, 3), GradBucket(100, 1)]
    assert ddp_buckets([[], []]) == []


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.lists(st.integers(1, 3000), max_size=3), min_size=1, max_size=8),
    first=st.integers(1, 4000),
    cap=st.integers(1, 8000),
)
def test_ddp_buckets_match_torch_assignment(sizes, first, cap) -> None:
    import torch
    import torch.distributed as dist

    if not hasattr(dist, "_compute_bucket_assignment_by_size"):
        pytest.skip("torch without the c10d bucket assignment helper")
    ready = [n for layer in reversed(sizes) for n in reversed(layer)]
    if not ready:
        return
    tensors = [torch.empty(n, dtype=torch.int8) for n in ready]
    indices, _ = dist._compute_bucket_assignment_by_size(
        tensors, [first, cap], [False] * len(tensors)
    )
    expected = [sum(ready[i] for i in bucket) for bucket in indices]
    assert [b.nbytes for b in ddp_buckets(sizes, cap, first)] == expected


def test_fusion_buckets_greedy_and_by_cycle() -> None:
    # Threshold 3 MiB, all ready at once: 0.5 + 0.75 (+2 would exceed) | 2 + 0.5 | 3.
    got = fusion_buckets(LAYERS, 3 * M)
    assert got == [GradBucket(5 * M // 4, 2), GradBucket(5 * M // 2, 0), GradBucket(3 * M, 0)]
    # Threshold 0 disables fusion: one allreduce per tensor.
    assert len(fusion_buckets(LAYERS, 0)) == 5
    # Backward 1 ms per layer, 1.5 ms cycles: layer 2 is ready in cycle 1, layers 1-0 in 2.
    got = fusion_buckets(LAYERS, 64 * M, bwd_layer_times=[1e-3] * 3, cycle_time_s=1.5e-3)
    assert got == [GradBucket(5 * M // 4, 2), GradBucket(11 * M // 2, 0)]


def per_byte(nbytes: float) -> float:
    return nbytes * 1e-3  # 1 ms per byte: easy hand arithmetic


def test_exposed_zero_when_backward_dominates() -> None:
    # Layer 0 has no parameters, so every bucket is ready before backward ends.
    buckets = ddp_buckets([[], [1000], [1000]], cap_bytes=1e9, first_bucket_bytes=1000)
    assert buckets == [GradBucket(1000, 2), GradBucket(1000, 1)]
    timeline = overlapped_allreduce_timeline([10.0, 10.0, 10.0], buckets, per_byte)
    assert timeline == [(10.0, 11.0), (20.0, 21.0)]
    assert overlapped_allreduce_exposed([10.0, 10.0, 10.0], buckets, per_byte) == 0.0


def test_exposed_is_comm_minus_overlap_by_hand() -> None:
    bwd = [1.0, 1.0, 1.0]  # layer 2 done at 1 s, layer 1 at 2 s, layer 0 at 3 s
    buckets = [GradBucket(1500, 2), GradBucket(1000, 0)]
    # A: 1 -> 2.5 s; B: ready at 3 s -> 4 s. Comm 2.5 s, overlapped 1.5 s: exposed 1 s.
    assert overlapped_allreduce_exposed(bwd, buckets, per_byte) == pytest.approx(1.0)
    # A: 1 -> 3.5 s, B waits for the stream: 3.5 -> 4.5 s. Exposed 1.5 s.
    buckets = [GradBucket(2500, 2), GradBucket(1000, 0)]
    assert overlapped_allreduce_exposed(bwd, buckets, per_byte) == pytest.approx(1.5)
    assert overlapped_allreduce_exposed(bwd, [], per_byte) == 0.0


def test_worst_case_term_of_eq_5_1() -> None:
    def ring(nbytes: float) -> float:
        return ring_allreduce_time(nbytes, 4, 1e9, 1e-5)

    th = 64 * M
    # 2(W-1) * (L + min(G, th) / (W BW)), G = 100 MB > th.
    expected = 6 * (1e-5 + th / (4 * 1e9))
    assert horovod_worst_case_exposed(100e6, th, ring) == pytest.approx(expected)
    assert horovod_worst_case_exposed(1e6, th, ring) == pytest.approx(6 * (1e-5 + 1e6 / 4e9))
    assert horovod_worst_case_exposed(0, th, ring) == 0.0


@settings(max_examples=60, deadline=None)
@given(
    layers=st.lists(
        st.tuples(st.floats(0.0, 1.0), st.lists(st.integers(1, 2000), max_size=2)),
        min_size=1,
        max_size=8,
    ),
    cap=st.integers(1, 4000),
)
def test_exposed_between_zero_and_serial(layers, cap) -> None:
    bwd = [t for t, _ in layers]
    buckets = ddp_buckets([sizes for _, sizes in layers], cap_bytes=cap, first_bucket_bytes=cap)
    exposed = overlapped_allreduce_exposed(bwd, buckets, per_byte)
    total_comm = sum(per_byte(b.nbytes) for b in buckets)
    assert 0.0 <= exposed <= total_comm + 1e-9
    if layers[0][1]:  # layer 0 has gradients: its bucket can only start after backward
        assert exposed >= per_byte(buckets[-1].nbytes) - 1e-9


def test_layer_tensor_bytes_falls_back_to_param_bytes() -> None:
    from hetplan.cost.comm import layer_tensor_bytes
    from hetplan.graph.types import LayerInfo

    def info(param_bytes: int, tensors: tuple[int, ...]) -> LayerInfo:
        return LayerInfo(
            name="x",
            fwd_flops=0,
            bwd_flops=0,
            params=0,
            param_bytes=param_bytes,
            param_tensor_bytes=tensors,
            out_bytes=0,
            saved_bytes=0,
            fwd_io_bytes=0,
            bwd_io_bytes=0,
        )

    got = layer_tensor_bytes([info(12, (8, 4)), info(20, ()), info(0, ())])
    assert got == [(8, 4), (20,), ()]
