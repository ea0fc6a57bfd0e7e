"""A prediction's plain data: each device as ``dataclasses.asdict`` has it, each memory
breakdown as its fields less the total (built by hand since issue 27: asdict's deep copies
took seconds over a 10,000-device ranking)."""

from __future__ import annotations

import dataclasses

from predict_synthetic import FixedCompute, cluster, graph

from hetplan.planspec import ModelRef
from hetplan.predict import plan_from_options, predict


def test_devices_as_asdict_has_them() -> None:
    g, c = graph(4), cluster(4)
    plan = plan_from_options(g, c, model=ModelRef(name="syn"), strategy="ps", batch=32)
    pred = predict(plan, g, c, FixedCompute())
    data = pred.to_json()
    assert data["devices"] == [dataclasses.asdict(d) for d in pred.devices]
    for row, dev in zip(data["devices"], pred.devices, strict=True):
        assert row["memory"] is not dev.memory  # a copy, as asdict makes
    assert {"weights", "framework", "ps_shard"} <= set(pred.devices[0].memory)
    assert "total" not in pred.devices[0].memory
