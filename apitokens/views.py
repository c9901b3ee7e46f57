"""/account/tokens/: a signed-in user lists their API tokens, creates one (its value is shown once, on the answer to
the POST, never stored in the session or a message) and revokes them."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.cache import never_cache

from apitokens.errors import TokenRequestError
from apitokens.forms import ApiTokenForm
from apitokens.models import ApiToken
from apitokens.scopes import SCOPES
from apitokens.services import api_token_create, api_token_revoke
from core.types import AuthenticatedHttpRequest


@method_decorator(never_cache, name="dispatch")
class ApiTokenListView(LoginRequiredMixin, View):
    template_name = "apitokens/token_list.html"

    def _render(self, request: HttpRequest, form: ApiTokenForm) -> HttpResponse:
        tokens = ApiToken.objects.for_user(request.user).order_by("-created_at", "-pk")
        return render(request, self.template_name, {"tokens": tokens, "form": form, "scopes": SCOPES})

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._render(request, ApiTokenForm())

    def post(self, request: AuthenticatedHttpRequest) -> HttpResponse:
        form = ApiTokenForm(request.POST)
        if form.is_valid():
            try:
                created = api_token_create(
                    actor=request.user, user=request.user, name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    expires_at=timezone.now() + timedelta(days=form.cleaned_data["expires_in_days"]),
                )
            except TokenRequestError as exc:
                form.add_error(None, str(exc))
            else:
                # Rendered, not redirected: the value must not pass through the session or a message.
                return render(request, "apitokens/token_created.html",
                              {"token": created.token, "plaintext": created.plaintext})
        return self._render(request, form)


class ApiTokenRevokeView(LoginRequiredMixin, View):
    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        token = get_object_or_404(ApiToken.objects.for_user(request.user), pk=pk)
        api_token_revoke(actor=request.user, token_id=token.pk, reason=request.POST.get("reason", "")[:1000])
        messages.success(request, f"Token {token.name} ({token.prefix}) revoked.")
        return redirect("apitokens:token_list")
