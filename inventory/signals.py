"""Signals the inventory sends so that upper layers (the catalog) can react without inventory importing them."""

from __future__ import annotations

from django.dispatch import Signal

# Sent after the transaction that changed derived devices commits; kwargs: cluster_id.
devices_changed = Signal()
