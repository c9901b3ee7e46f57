"""Build the API client of a registered cluster. Credentials stay in memory; nothing here logs them.

Every kubeconfig, stored or read from a file, is validated as data (inventory/k8s/kubeconfig.py) when a cluster is
registered and again each time a client is built, so a row written before the rules existed is refused on load.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from inventory.errors import ClusterConfigError
from inventory.k8s.client import ClusterClient, KubernetesClusterClient
from inventory.k8s.kubeconfig import MAX_KUBECONFIG_BYTES, kubeconfig_parse
from inventory.models import Cluster

# How services that talk to a cluster get its client: `client_for` in production, a fake in tests.
ClientFactory = Callable[[Cluster], ClusterClient]


def parse_kubeconfig(text: str, *, context: str = "") -> dict[str, Any]:
    """Parse and validate kubeconfig YAML against the operator's proxy allow-list; errors never echo the content."""
    return kubeconfig_parse(text, context=context, allowed_proxies=settings.PORTAL_KUBECONFIG_ALLOWED_PROXIES)


def kubeconfig_path_resolve(path: str) -> Path:
    """The real file behind a registered kubeconfig path, which must lie under PORTAL_KUBECONFIG_DIR once symlinks
    and `..` are resolved. The stored path itself is kept as given: a mounted Secret's files are symlinks into a
    timestamped directory that the kubelet replaces on every update."""
    root = settings.PORTAL_KUBECONFIG_DIR
    if not root:
        raise ClusterConfigError("kubeconfig paths are disabled (PORTAL_KUBECONFIG_DIR is not set): store the "
                                 "kubeconfig's content instead, or set PORTAL_KUBECONFIG_DIR to the directory where "
                                 "the kubeconfigs are mounted")
    if not os.path.isabs(path):
        raise ClusterConfigError(f"kubeconfig path {path!r} is not absolute")
    try:
        real_root = Path(root).resolve(strict=True)
        real = Path(path).resolve(strict=True)
    except (OSError, RuntimeError):
        raise ClusterConfigError(f"kubeconfig file {path!r} does not exist (or PORTAL_KUBECONFIG_DIR does not)") from None
    if real == real_root or not real.is_relative_to(real_root):
        raise ClusterConfigError(f"kubeconfig path {path!r} is outside PORTAL_KUBECONFIG_DIR ({root}) once symlinks "
                                 "and '..' are resolved")
    return real


def kubeconfig_path_read(path: str) -> str:
    """The content of a kubeconfig file under PORTAL_KUBECONFIG_DIR (a regular file, at most 1 MiB)."""
    real = kubeconfig_path_resolve(path)
    try:
        # O_NOFOLLOW: what was checked is what is opened, even if the last component became a symlink since.
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ClusterConfigError(f"cannot read kubeconfig file {path!r}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ClusterConfigError(f"kubeconfig path {path!r} is not a regular file")
        data = handle.read(MAX_KUBECONFIG_BYTES + 1)
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise ClusterConfigError(f"kubeconfig file {path!r} is larger than {MAX_KUBECONFIG_BYTES // 1024} KiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ClusterConfigError(f"kubeconfig file {path!r} is not UTF-8 text") from None


def cluster_connection_validate(*, connection: str, kubeconfig: str = "", kubeconfig_path: str = "",
                                context: str = "") -> None:
    """The registration-time check of a cluster's connection settings (cluster_register and the admin form): the
    kubeconfig, stored or named by path, is acceptable data and holds the context. Raises ClusterConfigError."""
    if connection == Cluster.ConnectionKind.KUBECONFIG:
        parse_kubeconfig(kubeconfig, context=context)
    elif connection == Cluster.ConnectionKind.KUBECONFIG_PATH:
        parse_kubeconfig(kubeconfig_path_read(kubeconfig_path), context=context)


def client_for(cluster: Cluster) -> KubernetesClusterClient:
    """The cluster's API client (a ClusterClient; a ClientFactory); its kubeconfig is validated again here."""
    timeouts = {"connect_timeout": settings.PORTAL_K8S_CONNECT_TIMEOUT, "read_timeout": settings.PORTAL_K8S_READ_TIMEOUT}
    if cluster.connection == Cluster.ConnectionKind.IN_CLUSTER:
        return KubernetesClusterClient.in_cluster(**timeouts)
    if cluster.connection == Cluster.ConnectionKind.KUBECONFIG_PATH:
        text = kubeconfig_path_read(cluster.kubeconfig_path)
    else:
        text = cluster.kubeconfig
    return KubernetesClusterClient.from_kubeconfig(
        parse_kubeconfig(text, context=cluster.context), context=cluster.context,
        allowed_proxies=settings.PORTAL_KUBECONFIG_ALLOWED_PROXIES, **timeouts,
    )
