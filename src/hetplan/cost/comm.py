"""Communication cost models: one import point for collectives, bucketing and PS.

The implementations live in :mod:`comm_collectives` (p2p, ring/tree/hierarchical allreduce),
:mod:`comm_buckets` (DDP buckets, Horovod fusion, overlap with backward) and :mod:`comm_ps`
(parameter servers). Tensor parallelism's all-reduces are in :mod:`hetplan.cost.tp`.
"""

from __future__ import annotations

from hetplan.cost.comm_buckets import (
    DDP_BUCKET_CAP_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    HOROVOD_CYCLE_TIME_S,
    HOROVOD_FUSION_THRESHOLD_BYTES,
    GradBucket,
    ddp_buckets,
    fusion_buckets,
    horovod_worst_case_exposed,
    layer_tensor_bytes,
    overlapped_allreduce_exposed,
    overlapped_allreduce_timeline,
)
from hetplan.cost.comm_collectives import (
    ALGORITHMS,
    allreduce_time,
    gpipe_comm_time,
    hierarchical_allreduce_time,
    p2p_time,
    ring_allreduce_time,
    ring_allreduce_time_links,
    ring_links,
    ring_tree_crossover_bytes,
    transfer_time,
    tree_allreduce_time,
)
from hetplan.cost.comm_ps import (
    GRPC_THREADS,
    POLICIES,
    SERIALIZE_BANDWIDTH,
    PsTiming,
    assign_ps_shards,
    ps_sync_time,
)

__all__ = [
    "ALGORITHMS",
    "DDP_BUCKET_CAP_BYTES",
    "DDP_FIRST_BUCKET_BYTES",
    "GRPC_THREADS",
    "HOROVOD_CYCLE_TIME_S",
    "HOROVOD_FUSION_THRESHOLD_BYTES",
    "POLICIES",
    "SERIALIZE_BANDWIDTH",
    "GradBucket",
    "PsTiming",
    "allreduce_time",
    "assign_ps_shards",
    "ddp_buckets",
    "fusion_buckets",
    "gpipe_comm_time",
    "hierarchical_allreduce_time",
    "horovod_worst_case_exposed",
    "layer_tensor_bytes",
    "overlapped_allreduce_exposed",
    "overlapped_allreduce_timeline",
    "p2p_time",
    "ps_sync_time",
    "ring_allreduce_time",
    "ring_allreduce_time_links",
    "ring_links",
    "ring_tree_crossover_bytes",
    "transfer_time",
    "tree_allreduce_time",
]
