"""Inventory pages (templates + htmx): clusters.py (clusters, their sync state, nodes) and accelerators.py (overview,
free capacity, devices, pending pods, findings). Read-only; no ORM writes here."""
