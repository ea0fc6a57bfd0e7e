"""Model graphs: nn.Module -> ordered partitionable layers with FLOPs, bytes and cuts.

Entry points: :func:`resolve_model` (name -> :class:`BuiltModel`), :func:`build_graph`
(-> :class:`ModelGraph`), :func:`build_module`, :func:`synthetic_batch`,
:func:`loss_function` (for the runtime).
"""

from hetplan.graph.built import BuiltModel
from hetplan.graph.data import build_module, loss_function, synthetic_batch
from hetplan.graph.extract import build_graph, select_layers, trace_graph
from hetplan.graph.resolve import resolve_model
from hetplan.graph.types import LayerInfo, ModelGraph
from hetplan.graph.zoo import ZOO

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
