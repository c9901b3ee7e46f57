"""Locust clients for bench/load.py: tenants in a browser and integrations on the REST API, against `large`.

Run by bench/load.py (headless, 50 users); it passes the session cookie, the API token and the ids to fetch in
LOAD_* environment variables. Every request carries `X-Forwarded-Proto: https`, as the ingress that terminates TLS
in front of the portal sets it, so the production settings (secure cookies, HSTS, SSL redirect) stay on.
"""

from __future__ import annotations

import json
import os
import random

from locust import FastHttpUser, between, constant, task

SETUP = json.loads(os.environ.get("LOAD_SETUP", "{}"))
THINK = float(os.environ.get("LOAD_THINK_SECONDS", "0"))
WAIT = between(THINK / 2, THINK * 1.5) if THINK > 0 else constant(0)
PROXY = {"X-Forwarded-Proto": "https"}


class TenantInBrowser(FastHttpUser):
    """A tenant member browsing: catalog, an offering, free capacity, the accelerator overview, nodes."""

    weight = 1
    wait_time = WAIT

    def on_start(self) -> None:
        self.headers = {**PROXY, "Cookie": f"{SETUP['session_cookie']}={SETUP['session']}"}

    def page(self, path: str, name: str) -> None:
        with self.client.get(path, headers=self.headers, name=name, catch_response=True,
                             allow_redirects=False) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}")  # a redirect to the login page is a failure too

    @task(3)
    def catalog(self) -> None:
        self.page("/catalog/", "page: catalog")

    @task(2)
    def offering(self) -> None:
        self.page(f"/catalog/o/{random.choice(SETUP['offerings'])}/", "page: offering detail")

    @task(3)
    def capacity(self) -> None:
        self.page("/inventory/capacity/", "page: free capacity")

    @task(2)
    def accelerators(self) -> None:
        self.page("/inventory/accelerators/", "page: accelerators")

    @task(2)
    def nodes(self) -> None:
        self.page(f"/inventory/nodes/?page={random.randint(1, SETUP['node_pages'])}", "page: nodes")


class IntegrationOnApi(FastHttpUser):
    """A CMDB / chargeback integration with an API token: the main lists, paginated."""

    weight = 1
    wait_time = WAIT

    def on_start(self) -> None:
        self.headers = {**PROXY, "Authorization": f"Bearer {SETUP['token']}", "Accept": "application/json"}

    def get(self, path: str, name: str) -> None:
        with self.client.get(path, headers=self.headers, name=name, catch_response=True) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}")

    @task(3)
    def devices(self) -> None:
        self.get(f"/api/v1/devices/?limit=100&offset={100 * random.randint(0, 50)}", "api: devices")

    @task(2)
    def nodes(self) -> None:
        self.get(f"/api/v1/nodes/?limit=100&offset={100 * random.randint(0, 40)}", "api: nodes")

    @task(2)
    def pods(self) -> None:
        self.get("/api/v1/pods/?limit=100", "api: pods")

    @task(2)
    def offerings(self) -> None:
        self.get("/api/v1/catalog/offerings/", "api: offerings (free capacity)")

    @task(1)
    def cmdb_cards(self) -> None:
        self.get("/api/v1/cmdb/cards/?limit=100", "api: cmdb cards")
