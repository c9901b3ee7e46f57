"""manage.py revoke_api_token PREFIX [--reason TEXT]: revoke a token by its public prefix (audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from apitokens.models import ApiToken
from apitokens.services import api_token_revoke
from apitokens.tokens import MARKER, PREFIX_LENGTH


class Command(BaseCommand):
    help = "Revoke an API token by its prefix (the 8 characters after ap_, shown in lists). Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix", metavar="PREFIX")
        parser.add_argument("--reason", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        prefix = options["prefix"].strip()
        if prefix.startswith(MARKER):  # accept ap_<prefix> (and never echo anything after it)
            prefix = prefix[len(MARKER):]
        prefix = prefix[:PREFIX_LENGTH]
        token = ApiToken.objects.filter(prefix=prefix).first()
        if token is None:
            raise CommandError(f"No API token with prefix {prefix!r}.")
        was_revoked = token.revoked_at is not None
        token = api_token_revoke(actor=None, token_id=token.pk, reason=options["reason"])
        if was_revoked:
            self.stdout.write(f"Token {token.prefix} was already revoked at {token.revoked_at:%Y-%m-%d %H:%M} UTC.")
        else:
            self.stdout.write(f"Revoked token {token.name!r} ({token.prefix}) of {token.user.get_username()}.")
