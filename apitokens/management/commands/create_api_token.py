"""manage.py create_api_token USER --scopes inventory:read,chargeback:read --expires 90d [--name N]
[--service-account] [--rate-limit N]: print a new API token once.

Only the token goes to stdout (so `TOKEN=$(manage.py create_api_token …)` captures exactly it); the note about it
goes to stderr. The database keeps only its hash.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from apitokens.errors import TokenRequestError
from apitokens.scopes import SCOPES, scopes_parse
from apitokens.services import api_token_create, expiry_parse, is_service_account, service_account_create


def _plain(text: str) -> str:
    return text  # the note on stderr is not an error: no red


class Command(BaseCommand):
    help = ("Create an API token for USER and print it once (stdout: the token only; stderr: a note). Scopes: "
            f"{', '.join(SCOPES)}. --service-account creates USER as a service account (active, no usable "
            "password) if it does not exist.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("user", metavar="USER", help="Username the token acts as.")
        parser.add_argument("--scopes", required=True, help="Comma-separated, e.g. inventory:read,chargeback:read.")
        parser.add_argument("--expires", required=True, help="90d, 12h, a date (2027-01-31, valid through that day, "
                                                             "UTC) or an ISO 8601 datetime.")
        parser.add_argument("--name", default="", help="A label for the token (default: cli-<date>).")
        parser.add_argument("--service-account", action="store_true",
                            help="Create USER as a service account if it does not exist (refused for a person).")
        parser.add_argument("--rate-limit", type=int, default=None, help="Requests per minute (default: setting).")

    def handle(self, *args: Any, **options: Any) -> None:
        now = timezone.now()
        try:  # check everything before creating anything
            scopes = scopes_parse(options["scopes"])
            expires_at = expiry_parse(options["expires"], now=now)
        except (ValueError, TokenRequestError) as exc:
            raise CommandError(str(exc)) from None
        username = options["user"]
        user = get_user_model().objects.filter(username=username).first()
        try:
            if options["service_account"]:
                if user is None:
                    user = service_account_create(actor=None, username=username)
                    self.stderr.write(f"Created service account {username} (active, no usable password).",
                                      style_func=_plain)
                elif not is_service_account(user):
                    raise CommandError(f"User {username} exists and is not a service account (it has a usable "
                                       "password or is inactive); drop --service-account to give it a token.")
            elif user is None:
                raise CommandError(f"No user {username}; add --service-account to create a service account.")
            created = api_token_create(
                actor=None, user=user, name=options["name"] or f"cli-{now:%Y-%m-%d}", scopes=scopes,
                expires_at=expires_at, rate_limit_per_minute=options["rate_limit"],
            )
        except TokenRequestError as exc:
            raise CommandError(str(exc)) from None
        token = created.token
        self.stdout.write(created.plaintext)
        self.stderr.write(
            f"Token {token.name!r} (prefix {token.prefix}) for {username}: scopes {', '.join(token.scopes)}, "
            f"expires {token.expires_at:%Y-%m-%d %H:%M} UTC, {token.rate_limit_per_minute} requests/minute.\n"
            "Store it now: it is not kept and cannot be shown again. Revoke: "
            f"manage.py revoke_api_token {token.prefix}",
            style_func=_plain,
        )
