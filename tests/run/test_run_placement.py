"""Where ranks run and which backend carries them; point-to-point staging through host memory
(the path of GPU ranks in a gloo job), exercised on CPU ranks against the reference."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from hetplan.cluster import load_cluster
from hetplan.errors import InputError
from hetplan.planspec import ModelRef, PipelinePlan, Plan, StagePlan
from hetplan.run.launch.placement import check_local_devices, job_backend, rank_devices
from hetplan.run.launch.spawn import launch_local
from hetplan.run.loop.job import TrainJob
from hetplan.run.loop.worker import train_rank
from hetplan.run.references.reference import reference_run
from hetplan.run.setup.model import ZooSource, layer_names

CLUSTERS = Path(__file__).resolve().parents[2] / "examples" / "clusters"
TIED = ZooSource(name=f"{Path(__file__).with_name('fidelity_models.py')}:tied_lm")


def _plan(devices: list[str], layers: list[str], model: str = "m") -> Plan:
    half = len(layers) // 2
    cuts = [layers[:half], layers[half:]][: len(devices)] if len(devices) > 1 else [layers]
    return Plan(
        model=ModelRef(name=model), strategy="1f1b" if len(devices) > 1 else "dp",
        global_batch=8, micro_batches=2,
        pipelines=[PipelinePlan(
            stages=[StagePlan(layers=c, devices=[d]) for c, d in zip(cuts, devices, strict=True)],
            batch=8,
        )],
    )  # fmt: skip


def test_ranks_run_on_their_cluster_devices() -> None:
    gpus = load_cluster(CLUSTERS / "hetero-2node.yaml")
    plan = _plan(["v100.3", "t4.1"], ["a", "b"])
    assert rank_devices(plan, gpus) == ["cuda:3", "cuda:1"]  # index within each node
    cpus = load_cluster(CLUSTERS / "local-cpu-hetero.yaml")
    assert rank_devices(_plan(["local.0", "local.2"], ["a", "b"]), cpus) == ["cpu", "cpu"]


def test_nccl_only_when_every_rank_has_a_gpu() -> None:
    assert job_backend(["cuda:0", "cuda:1"]) == "nccl"
    assert job_backend(["cuda:0", "cpu"]) == "gloo"
    assert job_backend(["cpu", "cpu"]) == "gloo"


def test_a_gpu_rank_on_a_machine_without_one_is_refused() -> None:
    with pytest.raises(InputError, match=r"rank 1 is to run on cuda:2 .* this machine has no CUDA"):
        check_local_devices(["cpu", "cuda:2"], [0, 1], 0)
    with pytest.raises(InputError, match="has 2 GPU"):
        check_local_devices(["cuda:0", "cuda:2"], [1], 2)
    check_local_devices(["cuda:0", "cuda:2"], [0], 1)  # rank 1 runs on another node


def test_staging_through_host_memory_trains_the_same_network() -> None:
    """Activations, their gradients and a weight tied across the two stages all cross as CPU
    copies, as a GPU rank's would under gloo."""
    plan = _plan(["d0", "d1"], layer_names(TIED), TIED.name)
    job = TrainJob(plan=plan, source=TIED, steps=2, seed=3, p2p_via_host=True)
    raw = launch_local(train_rank, 2, payload=job)
    got = [sum(r.loss[i] for r in raw if r.loss[i] is not None) for i in range(2)]
    ref, _ = reference_run(plan, TIED, seed=3, steps=2)
    torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-5, atol=1e-6)


MIXED = """
name: mixed
device_types:
  xeon: {base: cpu}
nodes:
  - name: n
    devices:
      - {type: xeon, count: 2}
      - {type: T4, count: 2}
      - {type: cpu, count: 1}
      - {type: V100-32GB, count: 1}
    link: {type: PCIe3x16}
"""


def test_gpus_are_numbered_among_gpus_and_cpu_bases_stay_cpus(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(MIXED)
    cluster = load_cluster(tmp_path / "c.yaml")
    ids = [d.id for d in cluster.devices]
    plan = Plan(
        model=ModelRef(name="m"), strategy="dp", global_batch=6, micro_batches=1,
        pipelines=[PipelinePlan(stages=[StagePlan(layers=["a"], devices=[d])], batch=1)
                   for d in ids],
    )  # fmt: skip
    # xeon x2 (a cpu type of its own), T4 x2, cpu, V100: the V100 is the node's third GPU.
    assert rank_devices(plan, cluster) == ["cpu", "cpu", "cuda:0", "cuda:1", "cpu", "cuda:2"]
