"""Write-back keeps a CPU type's thread count: a run of 2-thread ranks is not merged with
runs of 1-thread ranks, and prices 2-thread devices unscaled."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from writeback_helpers import LOCAL, REF, gpipe, measured, store_with_import

from hetplan.cluster import load_cluster
from hetplan.cluster.spec import Cluster
from hetplan.graph import build_graph
from hetplan.profile.measured import MeasuredCompute
from hetplan.profile.store import load_profiles
from hetplan.run.measurement.writeback import write_measured


def _two_cores(cluster: Cluster) -> Cluster:
    """``cluster`` with every device pinned to two cores of its own."""
    devices = tuple(
        dataclasses.replace(d, cpus=(2 * d.index, 2 * d.index + 1)) for d in cluster.devices
    )
    return dataclasses.replace(cluster, devices=devices)


def test_a_run_at_another_thread_count_starts_afresh(tmp_path: Path) -> None:
    plan, one_core = gpipe(["local.0", "local.1"]), load_cluster(LOCAL)
    m = measured(plan, [(8e-3, 16e-3), (4e-3, 4e-3)])
    write_measured(m, one_core, None, tmp_path)
    back = write_measured(m, one_core, None, tmp_path)
    assert [w.runs for w in back.written] == [(2,)]
    assert [p.threads for p in load_profiles(tmp_path)] == [1]
    two_cores = _two_cores(one_core)
    back = write_measured(m, two_cores, None, tmp_path)
    assert [w.runs for w in back.written] == [(1,)]  # not merged with the 1-thread runs
    [p] = load_profiles(tmp_path)
    assert p.threads == 2
    dev = two_cores.device("local.0")
    costs = MeasuredCompute([p]).layer_costs(build_graph(REF), dev, 2)
    assert {c.source for c in costs} == {"measured on cpu (2 threads) (written back)"}


def test_a_profile_of_another_thread_count_does_not_shadow_the_run(tmp_path: Path) -> None:
    store = store_with_import(tmp_path)  # imported: no thread count, counts as one thread
    plan, one_core = gpipe(["local.0", "local.1"]), load_cluster(LOCAL)
    m = measured(plan, [(8e-3, 16e-3), (4e-3, 4e-3)])
    assert [w.shadowed for w in write_measured(m, one_core, None, store).written] == [(2,)]
    two_cores = _two_cores(one_core)
    # On 2-thread ranks the 1-thread profile is scaled, not used as it is: the run prices them.
    assert [w.shadowed for w in write_measured(m, two_cores, None, store).written] == [()]
