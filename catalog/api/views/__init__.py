"""The catalog's REST API: offerings.py (offerings, compatibility, selector check; catalog.api.urls) and manifests.py
(manifest validation and generation, feasibility; catalog.api.manifest_urls)."""
