"""Devices, links and clusters: the catalog, the cluster file, and their resolved types."""

from hetplan.cluster.catalog import DEVICE_CATALOG, device_type
from hetplan.cluster.config import (
    ClusterConfig,
    cluster_from_data,
    config_from_data,
    config_to_data,
    load_cluster,
    load_cluster_config,
    write_cluster_config,
)
from hetplan.cluster.export import cluster_to_config
from hetplan.cluster.links import LINK_CATALOG, LinkType, link_type
from hetplan.cluster.resolve import resolve_config
from hetplan.cluster.spec import Cluster, Device, DeviceType, Link
from hetplan.cluster.summary import ClusterSummary, summarize

__all__ = [
    "DEVICE_CATALOG",
    "LINK_CATALOG",
    "Cluster",
    "ClusterConfig",
    "ClusterSummary",
    "Device",
    "DeviceType",
    "Link",
    "LinkType",
    "cluster_from_data",
    "cluster_to_config",
    "config_from_data",
    "config_to_data",
    "device_type",
    "link_type",
    "load_cluster",
    "load_cluster_config",
    "resolve_config",
    "summarize",
    "write_cluster_config",
]
