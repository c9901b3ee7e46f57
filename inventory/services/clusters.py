"""Cluster registry writes."""

from __future__ import annotations

from django.db import transaction

from audit.services import audit_record
from inventory.errors import ClusterConfigError
from inventory.models import Cluster
from inventory.services.clients import parse_kubeconfig


@transaction.atomic(durable=True)
def cluster_register(
    *, name: str, kubeconfig: str = "", kubeconfig_path: str = "", in_cluster: bool = False, context: str = "",
    description: str = "", actor: object = None,
) -> Cluster:
    """Create or update a cluster's connection settings. Idempotent by name. Validates, never logs, the kubeconfig."""
    if sum(bool(x) for x in (kubeconfig, kubeconfig_path, in_cluster)) != 1:
        raise ClusterConfigError("give exactly one of kubeconfig content, kubeconfig path or in-cluster")
    if kubeconfig:
        parse_kubeconfig(kubeconfig)
        connection = Cluster.ConnectionKind.KUBECONFIG
    elif kubeconfig_path:
        connection = Cluster.ConnectionKind.KUBECONFIG_PATH
    else:
        connection = Cluster.ConnectionKind.IN_CLUSTER
    previous = Cluster.objects.filter(name=name).values("connection", "kubeconfig_path", "context",
                                                         "description").first()
    cluster, created = Cluster.objects.update_or_create(
        name=name,
        defaults={
            "connection": connection, "kubeconfig": kubeconfig, "kubeconfig_path": kubeconfig_path,
            "context": context, "description": description, "sync_enabled": True,
        },
    )
    # The kubeconfig is a secret: the audit records that it changed, never its content.
    after = {"connection": connection, "kubeconfig_path": kubeconfig_path, "context": context,
             "description": description}
    audit_record(actor=actor, verb="cluster.registered" if created else "cluster.updated", target=cluster,
                 before=previous, after=after)
    return cluster
