"""Where each rank runs, and which backend carries the job.

A rank runs on its plan device: ``cuda:<k>`` for the k-th GPU its node lists in the cluster file
(CPU devices of the node not counted; ``CUDA_VISIBLE_DEVICES`` renumbers as usual), ``cpu`` for a
CPU device (a type whose base is the catalog's ``cpu``). NCCL carries the job when every rank
is on a GPU of its own; gloo otherwise, including jobs that mix CPU and GPU ranks (the GPU ranks
then stage point-to-point tensors through host memory, :func:`hetplan.run.execute.p2p.configure`;
gloo's all-reduce takes CUDA tensors itself).
"""

from __future__ import annotations

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.planspec import Plan
from hetplan.run.setup.layout import run_devices


def gpu_index(cluster: Cluster, device_id: str) -> int:
    """The CUDA index of a GPU device: how many GPUs its node lists before it (CPU devices of
    the node do not count)."""
    dev = cluster.device(device_id)
    before = [d for d in cluster.devices if d.node == dev.node and d.index < dev.index]
    return sum(1 for d in before if not d.type.is_cpu)


def rank_devices(plan: Plan, cluster: Cluster) -> list[str]:
    """The torch device of every plan rank, from the cluster file."""
    out = []
    for dev_id in run_devices(plan):
        dev = cluster.device(dev_id)
        out.append("cpu" if dev.type.is_cpu else f"cuda:{gpu_index(cluster, dev_id)}")
    return out


def job_backend(devices: list[str]) -> str:
    """nccl when every rank has a GPU of its own (per node), gloo otherwise."""
    return "nccl" if devices and all(d.startswith("cuda") for d in devices) else "gloo"


def check_local_devices(devices: list[str], ranks: list[int], gpus: int) -> None:
    """InputError when a rank started here needs a GPU this machine lacks."""
    for r in ranks:
        d = devices[r]
        if d.startswith("cuda") and int(d.partition(":")[2]) >= gpus:
            have = f"{gpus} GPU(s)" if gpus else "no CUDA GPU"
            raise InputError(
                f"rank {r} is to run on {d} (its plan device is a GPU in the cluster file) but "
                f"this machine has {have}; use a cluster file that describes this machine"
            )
