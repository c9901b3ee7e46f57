from __future__ import annotations

from typing import Any, cast

from django import forms
from django.core.validators import MaxValueValidator

from apitokens.scopes import INVENTORY_READ, SCOPES
from apitokens.services import max_lifetime


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. 'cmdb-sync'.")
    scopes = forms.MultipleChoiceField(choices=[(scope, f"{scope} — {text}") for scope, text in SCOPES.items()],
                                       widget=forms.CheckboxSelectMultiple, initial=[INVENTORY_READ])
    expires_in_days = forms.IntegerField(label="Expires in (days)", min_value=1, initial=90)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        days = max_lifetime().days
        field = cast(forms.IntegerField, self.fields["expires_in_days"])  # declared above
        field.max_value = days
        field.validators.append(MaxValueValidator(days))
        field.widget.attrs["max"] = days
        field.help_text = f"At most {days}."
