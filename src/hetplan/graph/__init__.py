"""Model graphs: nn.Module -> ordered partitionable layers with FLOPs, bytes and cuts."""

from hetplan.graph.types import LayerInfo, ModelGraph

__all__ = ["LayerInfo", "ModelGraph"]
