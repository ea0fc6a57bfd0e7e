"""Which cluster a plan was made for: a digest of its device ids, types and nodes.

Links and power figures are left out on purpose: measuring a cluster's links
(``profile-links``) or fitting its power does not make a plan invalid, while a device that is
another type, or a plan written for another machine whose ids happen to match, does.
"""

from __future__ import annotations

import dataclasses
import hashlib

from hetplan.cluster.spec import Cluster
from hetplan.errors import InputError
from hetplan.planspec.plan import Plan

DIGEST_CHARS = 16
"""Hex characters of the sha256 kept: 64 bits, ample against accidental matches."""


def cluster_digest(cluster: Cluster) -> str:
    """The digest of ``cluster``'s device ids, types and nodes (in file order)."""
    h = hashlib.sha256()
    for d in cluster.devices:
        h.update(f"{d.id}\0{d.type.name}\0{d.node}\n".encode())
    return h.hexdigest()[:DIGEST_CHARS]


def stamped(plan: Plan, cluster: Cluster) -> Plan:
    """``plan`` marked as made for ``cluster``."""
    return dataclasses.replace(plan, cluster=cluster.name, cluster_digest=cluster_digest(cluster))


def check_cluster(plan: Plan, cluster: Cluster, *, where: str, option: str) -> None:
    """InputError when ``plan`` was made for another cluster than ``cluster`` (plans without a
    digest, written by hand or by older versions, pass). ``where`` names the plan file and
    ``option`` the flag that overrides the check."""
    if plan.cluster_digest is None:
        return
    digest = cluster_digest(cluster)
    if plan.cluster_digest == digest:
        return
    raise InputError(
        f"{where} was made for cluster {plan.cluster!r} (devices digest "
        f"{plan.cluster_digest}), not for cluster {cluster.name!r} (digest {digest}): plan "
        f"again for this cluster, or add {option} to use the plan anyway"
    )
