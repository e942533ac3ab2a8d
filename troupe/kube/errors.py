"""Errors of the API, mapped once from the HTTP status (`error_of`, called by
the transport for every answer that is not 2xx): callers catch types, never
read statuses or messages.

- 404: `NotFound` (troupe.core.cluster; on a list, the cluster does not serve
  the kind);
- 409: `Conflict`, or the subclass the caller names (`BindConflict` on bind,
  `LeaseConflict` on the Lease), with the server's message;
- 410: `Gone` (a watch's or a list's resourceVersion is too old: re-list);
- anything else: `ApiError`, whose status the transport reads to retry 429
  and 5xx, and whose text is the status and the server's message, never the
  response headers.
"""

from __future__ import annotations

from typing import Final

from troupe.api import jsonio
from troupe.core.cluster import Conflict, NotFound

# Statuses worth another attempt (client-go retries 429 and 5xx the same way).
RETRIABLE: Final = frozenset({429, 500, 502, 503, 504})


class Gone(Exception):
    """410 Gone: the resourceVersion asked for is too old; re-list."""


class NoAnswer(TimeoutError):
    """The server did not answer within the request's read timeout (the
    request may have been carried out); the lane retries it."""


class ApiError(Exception):
    """An API error without the response headers: `HTTP 500 (InternalError): msg`.
    Status 0: no answer came (a TLS failure)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status

    @property
    def retriable(self) -> bool:
        return self.status in RETRIABLE


# What the transport raises when the API server answered and refused: the
# request was not carried out (unlike a timeout, after which it may have been).
REFUSED: Final = (NotFound, Conflict, Gone, ApiError)


def describe(status: int, reason: str | None, body: bytes) -> str:
    """`HTTP <status> (<reason>): <the Status's message>`."""
    message = ""
    if body:
        try:
            doc = jsonio.loads(body)
        except (jsonio.JSONError, TypeError):
            doc = None
        if isinstance(doc, dict):
            message = str(doc.get("message") or "")
    why = str(reason or "").strip()
    return f"HTTP {status}" + (f" ({why})" if why else "") + (f": {message}" if message else "")


def error_of(
    status: int,
    reason: str | None,
    body: bytes,
    key: str,
    conflict: type[Conflict] = Conflict,
) -> Exception:
    """The error to raise for an answer `status` about `key` (an object's key,
    or the request): NotFound on 404, `conflict` on 409, Gone on 410, else
    ApiError. The one place where statuses become types."""
    if status == 404:
        return NotFound(key)
    text = describe(status, reason, body)
    if status == 409:
        return conflict(f"{key}: {text}")
    if status == 410:
        return Gone(text)
    return ApiError(status, text)
