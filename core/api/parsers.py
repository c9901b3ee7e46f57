"""Request body parsing for the REST API: JSON with a size limit and a clear answer to hostile nesting.

DRF reads the body from the request stream, which bypasses Django's DATA_UPLOAD_MAX_MEMORY_SIZE (that limit is only
checked by `request.body` and form parsing), and `json.loads` raises RecursionError, not a ValueError, for deeply
nested input, which DRF would turn into a 500. Both become a 400 here.
"""

from __future__ import annotations

import io
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    """JSON bodies of at most DATA_UPLOAD_MAX_MEMORY_SIZE bytes (Django's default: 2.5 MB); deeper nesting than
    Python's decoder can follow answers 400 instead of 500."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(body) > limit:
            raise ParseError(f"The request body is larger than {limit:,} bytes.")
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply.") from None
