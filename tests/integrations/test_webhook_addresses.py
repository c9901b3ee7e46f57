"""Webhook targets: no loopback, private, link-local or metadata address unless allow-listed (SSRF), one resolution
per delivery attempt pinned for the connection (DNS rebinding) with the hostname kept for Host, SNI and the
certificate check, and secrets encrypted at rest."""

from __future__ import annotations

import datetime as dt
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.utils import timezone

from integrations import addresses
from integrations.delivery import SIGNATURE_HEADER, signature_valid
from integrations.errors import WebhookValidationError
from integrations.models import WebhookDelivery, WebhookSubscription
from integrations.services import webhook_delivery_attempt, webhook_subscription_create, webhook_subscription_update
from portal.tenancy.roles import Role
from tests.conftest import make_user
from tests.integrations.conftest import SECRET, Endpoint

pytestmark = pytest.mark.django_db


class Resolver:
    """Stands in for DNS: answers from a script, one answer per call (the last one repeats), and counts calls."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[str] = []

    def __call__(self, hostname: str, port: int) -> list[str]:
        self.calls.append(hostname)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*answers: list[str]) -> Resolver:
        stub = Resolver(*answers)
        monkeypatch.setattr(addresses, "resolve", stub)
        return stub

    return install


@pytest.fixture
def no_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    class Quiet:
        def delay(self, *args: Any) -> None:
            pass

        def apply_async(self, *args: Any, **kwargs: Any) -> None:
            pass

    monkeypatch.setattr("integrations.services.webhook_deliver_task", Quiet())


def _create(url: str, name: str = "hook") -> WebhookSubscription:
    return webhook_subscription_create(actor=None, name=name, url=url, secret=SECRET, event_types=["node."])


def _delivery(subscription: WebhookSubscription) -> WebhookDelivery:
    return WebhookDelivery.objects.create(subscription=subscription, source="changes", event_id=1,
                                          event_type="node.created", payload={"type": "node.created"},
                                          next_attempt_at=timezone.now())


REFUSED = [
    "http://127.0.0.1/hook", "http://127.8.9.10:8080/hook", "http://[::1]/hook", "http://10.1.2.3/hook",
    "http://172.16.5.4/hook", "http://172.31.255.1/hook", "http://192.168.1.1/hook",
    "http://169.254.169.254/latest/meta-data/", "http://[fd00::1]/hook", "http://[fe80::1]/hook",
    "http://0.0.0.0/hook", "http://[::]/hook", "http://[::ffff:127.0.0.1]/hook", "http://[::ffff:10.0.0.1]/hook",
    "http://[::ffff:169.254.169.254]/", "http://[2002:a00:1::]/hook", "http://100.64.0.1/hook",
    "http://224.0.0.1/hook",
]


@pytest.mark.parametrize("url", REFUSED)
def test_creation_refuses_non_public_addresses(url: str) -> None:
    with pytest.raises(WebhookValidationError, match="deliveries may not go to"):
        _create(url)
    assert not WebhookSubscription.objects.exists()


@pytest.mark.parametrize("answer", [["10.0.0.7"], ["127.0.0.1"], ["93.184.215.14", "192.168.0.9"],
                                    ["::ffff:169.254.169.254"]])
def test_creation_refuses_a_name_that_resolves_to_a_non_public_address(resolver: Any, answer: list[str]) -> None:
    resolver(answer)
    with pytest.raises(WebhookValidationError, match=r"deliveries may not go to cmdb\.corp\.test"):
        _create("https://cmdb.corp.test/hook")


def test_public_addresses_and_allow_listed_networks_are_accepted(resolver: Any, settings: Any) -> None:
    resolver(["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
    _create("https://cmdb.example.test/hook", name="by-name")
    _create("https://93.184.215.14/hook", name="by-address")
    with pytest.raises(WebhookValidationError):
        _create("http://10.20.30.40:8080/hook", name="internal")
    settings.PORTAL_WEBHOOK_ALLOWED_NETWORKS = ["10.20.0.0/16", "not-a-network"]
    _create("http://10.20.30.40:8080/hook", name="internal")
    with pytest.raises(WebhookValidationError):
        _create("http://10.21.0.1/hook", name="outside-the-allow-list")


def test_a_name_that_does_not_resolve_yet_is_accepted_and_checked_at_delivery(monkeypatch: Any) -> None:
    def nowhere(hostname: str, port: int) -> list[str]:
        raise addresses.WebhookResolutionError(f"cannot resolve {hostname}")

    monkeypatch.setattr(addresses, "resolve", nowhere)
    _create("https://not-yet.example.test/hook")


def test_the_api_and_updates_refuse_them_too(resolver: Any) -> None:
    admin = make_user("hooks-admin", Role.PLATFORM_ADMIN)
    client = Client()
    client.force_login(admin)
    body = {"name": "meta", "url": "http://169.254.169.254/latest/meta-data/", "secret": SECRET,
            "event_types": ["node."]}
    refused = client.post("/api/v1/webhooks/", body, content_type="application/json")
    assert refused.status_code == 400
    assert "link-local" in refused.content.decode()
    resolver(["93.184.215.14"])
    subscription = _create("https://cmdb.example.test/hook")
    with pytest.raises(WebhookValidationError, match="loopback"):
        webhook_subscription_update(actor=None, subscription_id=subscription.pk, url="http://[::1]:8080/")
    answer = client.patch(f"/api/v1/webhooks/{subscription.pk}/", {"url": "http://192.168.0.1/"},
                          content_type="application/json")
    assert answer.status_code == 400
    assert WebhookSubscription.objects.get(pk=subscription.pk).url == "https://cmdb.example.test/hook"


def test_a_delivery_to_a_refused_address_fails_without_a_request(no_queue: None, resolver: Any) -> None:
    endpoint = Endpoint()  # on loopback, not allow-listed here
    try:
        resolver(["93.184.215.14"])
        subscription = _create("https://cmdb.example.test/hook")
        WebhookSubscription.objects.filter(pk=subscription.pk).update(url=endpoint.url)  # saved before this check
        result = webhook_delivery_attempt(delivery_id=_delivery(subscription).pk)
    finally:
        endpoint.close()
    assert result.status == WebhookDelivery.Status.FAILED
    assert "loopback" in result.last_error
    assert endpoint.requests == []


def test_dns_rebinding_one_resolution_per_attempt_and_the_pinned_address(no_queue: None, resolver: Any,
                                                                         settings: Any) -> None:
    """The name answers an allowed address, then a private one. An attempt resolves once and connects to what it
    got, with the original Host header; the next attempt resolves again and is refused. Never a second lookup
    inside one attempt (urllib3 would otherwise resolve again when it connects)."""
    settings.PORTAL_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]  # stands for the public address in this test
    endpoint = Endpoint()
    try:
        port = endpoint.server.server_address[1]
        stub = resolver(["127.0.0.1"])
        subscription = _create(f"http://hook.rebind.test:{port}/hook?token=t")
        stub = resolver(["127.0.0.1"], ["10.9.9.9"])  # first lookup of the attempt: allowed; any later: private
        first = webhook_delivery_attempt(delivery_id=_delivery(subscription).pk)
        assert stub.calls == ["hook.rebind.test"]  # resolved once
        assert first.status == WebhookDelivery.Status.DELIVERED, first.last_error
        (request,) = endpoint.requests
        assert request["headers"]["Host"] == f"hook.rebind.test:{port}"
        assert request["path"] == "/hook?token=t"
        assert signature_valid(SECRET, request["body"], request["headers"][SIGNATURE_HEADER])

        WebhookDelivery.objects.all().delete()
        second = webhook_delivery_attempt(delivery_id=_delivery(subscription).pk)
        assert stub.calls == ["hook.rebind.test", "hook.rebind.test"]
        assert second.status == WebhookDelivery.Status.FAILED
        assert "10.9.9.9 is a private address" in second.last_error
        assert len(endpoint.requests) == 1
    finally:
        endpoint.close()


def test_a_name_answering_an_allowed_and_a_private_address_is_refused_whole(no_queue: None, resolver: Any,
                                                                           settings: Any) -> None:
    settings.PORTAL_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    resolver(["127.0.0.1"])
    subscription = _create("http://mixed.rebind.test/hook")
    resolver(["127.0.0.1", "10.9.9.9"])
    result = webhook_delivery_attempt(delivery_id=_delivery(subscription).pk)
    assert result.status == WebhookDelivery.Status.FAILED
    assert "10.9.9.9" in result.last_error


def _self_signed(tmp_path: Any, name: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture
def tls_endpoint(tmp_path: Any) -> Iterator[dict[str, Any]]:
    """An HTTPS server on loopback with a self-signed certificate; records the SNI name of each handshake."""
    seen: dict[str, Any] = {"sni": [], "requests": 0}
    cert, key = _self_signed(tmp_path, "hook.tls.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: seen["sni"].append(name)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen["requests"] += 1
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    seen["port"] = server.server_address[1]
    yield seen
    server.shutdown()
    server.server_close()


def test_https_sends_the_hostname_as_sni_and_checks_the_certificate(no_queue: None, resolver: Any, settings: Any,
                                                                    tls_endpoint: dict[str, Any]) -> None:
    settings.PORTAL_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    resolver(["127.0.0.1"])
    subscription = _create(f"https://hook.tls.test:{tls_endpoint['port']}/hook")
    result = webhook_delivery_attempt(delivery_id=_delivery(subscription).pk)
    assert tls_endpoint["sni"] == ["hook.tls.test"]  # SNI is the name, not the pinned address
    assert result.status == WebhookDelivery.Status.PENDING  # retried: the self-signed certificate is not trusted
    assert "CERTIFICATE_VERIFY_FAILED" in result.last_error
    assert tls_endpoint["requests"] == 0


# ---------------------------------------------------------------------------------------------- secret at rest


def _raw_secret(pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM integrations_webhooksubscription WHERE id = %s", [pk])
        return cursor.fetchone()[0]


def test_secrets_are_encrypted_at_rest(resolver: Any) -> None:
    resolver(["93.184.215.14"])
    subscription = _create("https://cmdb.example.test/hook")
    raw = _raw_secret(subscription.pk)
    assert raw.startswith("enc:v1:")
    assert SECRET not in raw
    assert WebhookSubscription.objects.get(pk=subscription.pk).secret == SECRET  # decrypted to sign


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_existing_secrets() -> None:
    executor = MigrationExecutor(connection)
    latest = [key for key in executor.loader.graph.leaf_nodes() if key[0] == "integrations"]
    executor.migrate([("integrations", "0001_initial")])
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO integrations_webhooksubscription (name, url, secret, event_types, active, created_at, "
                "updated_at) VALUES ('old', 'https://cmdb.example.test/hook', %s, %s::jsonb, true, now(), now()) "
                "RETURNING id", [SECRET, '["node."]'])
            pk = cursor.fetchone()[0]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(latest)
    raw = _raw_secret(pk)
    assert raw.startswith("enc:v1:")
    assert SECRET not in raw
    assert WebhookSubscription.objects.get(pk=pk).secret == SECRET
