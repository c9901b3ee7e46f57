"""Build the API client of a registered cluster. Credentials stay in memory; nothing here logs them."""

from __future__ import annotations

from typing import Any

import yaml
from django.conf import settings

from inventory.errors import ClusterConfigError
from inventory.k8s.client import KubernetesClusterClient
from inventory.models import Cluster


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """Parse kubeconfig YAML; the error never echoes the content (it holds credentials)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ClusterConfigError("kubeconfig is not valid YAML") from None
    if not isinstance(data, dict) or not data.get("clusters"):
        raise ClusterConfigError("kubeconfig has no clusters")
    return data


def client_for(cluster: Cluster) -> KubernetesClusterClient:
    timeouts = {"connect_timeout": settings.PORTAL_K8S_CONNECT_TIMEOUT, "read_timeout": settings.PORTAL_K8S_READ_TIMEOUT}
    if cluster.connection == Cluster.ConnectionKind.IN_CLUSTER:
        return KubernetesClusterClient.in_cluster(**timeouts)
    if cluster.connection == Cluster.ConnectionKind.KUBECONFIG_PATH:
        return KubernetesClusterClient.from_kubeconfig_path(cluster.kubeconfig_path, context=cluster.context, **timeouts)
    return KubernetesClusterClient.from_kubeconfig(parse_kubeconfig(cluster.kubeconfig), context=cluster.context,
                                                   **timeouts)
