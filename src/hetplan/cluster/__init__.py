"""Devices, links and clusters: the catalog, the cluster file, and their resolved types."""

from hetplan.cluster.spec import Cluster, Device, DeviceType, Link

__all__ = ["Cluster", "Device", "DeviceType", "Link"]
