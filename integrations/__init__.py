"""Outbound integrations: signed webhooks for inventory changes and audit events (docs/changes-webhooks.md).

A top-level app: it reads inventory and audit, and nothing imports it (settings and URLs name it by string).
"""
