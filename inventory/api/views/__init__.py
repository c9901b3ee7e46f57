"""Read-only REST resources of the inventory: clusters.py (clusters, nodes) and accelerators.py (devices, pods,
resource slices, device classes, resource claims, findings). The CMDB and the change feed are cmdb.py, changes.py."""
