"""Build the API client of a registered cluster. Credentials stay in memory; nothing here logs them."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from inventory.errors import ClusterConfigError
from inventory.k8s.client import KubernetesClusterClient
from inventory.models import Cluster
from inventory.untrusted_text import UntrustedTextError, load_documents


def parse_kubeconfig(text: str) -> dict[str, Any]:
    """Parse kubeconfig YAML with the hardened reader (no aliases, bounded size and depth); the error never echoes
    the content (it holds credentials)."""
    try:
        documents = load_documents(text, max_documents=1)
    except UntrustedTextError as exc:
        reason = "is not valid YAML" if exc.code in ("yaml-syntax", "json-syntax", "not-text") else f"refused ({exc.code})"
        raise ClusterConfigError(f"kubeconfig {reason}") from None
    data = documents[0] if documents else None
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
