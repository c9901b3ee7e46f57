"""The gang view of an offering's capacity on the demo cluster: can an N x R job start now, and what would make room."""

from __future__ import annotations

import pytest
from django.urls import reverse

from catalog.services.capacity import capacity_refresh
from tests.catalog.factories import OfferingFactory

pytestmark = pytest.mark.slow


def test_offering_page_answers_whether_an_n_by_r_job_starts_now(live_demo, client, member) -> None:
    # demo h100 pool: h100-000 has 3 free cards, h100-001 none (llm-finetune holds its 8)
    _, cluster = live_demo
    OfferingFactory(slug="h100", name="H100", resource_name="nvidia.com/gpu", request_sizes=[1, 8],
                    node_selector={"kubesim.io/node-pool": "h100"})
    capacity_refresh(clusters=[cluster])
    client.force_login(member)
    page = client.get(reverse("catalog:offering_detail", args=["h100"])).content.decode()
    assert "Gang view" in page
    assert 'value="8"' in page  # the reference request is the default size

    def gang(pods: int, units: int) -> str:
        url = reverse("catalog:offering_gang", args=["h100"]) + f"?cluster={cluster.pk}&pods={pods}&units={units}"
        response = client.get(url, headers={"HX-Request": "true"})
        assert response.status_code == 200
        return response.content.decode()

    nowhere = gang(4, 8)
    assert "a 4x8 job fits nowhere now: not even one 8-unit pod" in nowhere
    assert "1 node holds 3 free units (1 of them fewer than 8)" in nowhere
    assert "h100-001 frees 8 nvidia.com/gpu when" in nowhere  # what would make room
    assert "only 3 of its 4 pods can start together" in gang(4, 1)
    assert "a 3x1 job fits now, on 1 node" in gang(3, 1)
    assert "Between 1 and 64 pods" in gang(65, 1)
