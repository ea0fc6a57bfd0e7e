"""Model graphs: nn.Module -> ordered partitionable layers with FLOPs, bytes and cuts.

Entry points: :func:`resolve_model` (name -> :class:`BuiltModel`), :func:`build_graph`
(-> :class:`ModelGraph`), :func:`build_module`, :func:`synthetic_batch`,
:func:`loss_function` (for the runtime).
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hetplan.graph.built import BuiltModel
    from hetplan.graph.data import build_module, loss_function, synthetic_batch
    from hetplan.graph.extract import build_graph, select_layers, trace_graph
    from hetplan.graph.resolve import resolve_model
    from hetplan.graph.types import LayerInfo, ModelGraph
    from hetplan.graph.zoo import ZOO

# Loaded on first use (PEP 562): the submodules import torch (~2 s), which light commands
# such as `hetplan models` (from its cache) never need.
_HOMES = {
    "BuiltModel": "built",
    "build_module": "data",
    "loss_function": "data",
    "synthetic_batch": "data",
    "build_graph": "extract",
    "select_layers": "extract",
    "trace_graph": "extract",
    "resolve_model": "resolve",
    "LayerInfo": "types",
    "ModelGraph": "types",
    "ZOO": "zoo",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'hetplan.graph' has no attribute {name!r}")
    return getattr(importlib.import_module(f"hetplan.graph.{home}"), name)


__all__ = [
    "ZOO",
    "BuiltModel",
    "LayerInfo",
    "ModelGraph",
    "build_graph",
    "build_module",
    "loss_function",
    "resolve_model",
    "select_layers",
    "synthetic_batch",
    "trace_graph",
]
