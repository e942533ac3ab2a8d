"""Errors of the API, mapped once from the HTTP status: callers catch types
(`NotFound`, `Conflict`, `BindConflict` from troupe.core.cluster, `ApiError` for
the rest), never read messages."""

from __future__ import annotations

import json

from kubernetes import client as k8s

from troupe.core.cluster import Conflict, NotFound


class Gone(Exception):
    """410 Gone: the resourceVersion asked for is too old; re-list."""


class NotServed(Exception):
    """404 on a collection: the cluster does not serve the kind."""


class ApiError(Exception):
    """An API error without the response headers: `HTTP 500 (InternalError): msg`."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def api_error(e: k8s.ApiException) -> ApiError:
    status = int(e.status or 0)
    message = ""
    try:
        body = json.loads(e.body) if e.body else {}
        if isinstance(body, dict):
            message = str(body.get("message") or "")
    except (ValueError, TypeError):
        message = ""
    reason = str(e.reason or "").strip()
    text = (
        f"HTTP {status}" + (f" ({reason})" if reason else "") + (f": {message}" if message else "")
    )
    return ApiError(status, text)


def typed(e: k8s.ApiException, what: str, conflict: type[Conflict] = Conflict) -> Exception:
    """The error to raise for a failed call about `what` (an object's key):
    NotFound on 404, `conflict` on 409 (with the server's message), else
    ApiError. The one place where statuses become types."""
    if e.status == 404:
        return NotFound(what)
    if e.status == 409:
        return conflict(f"{what}: {api_error(e)}")
    return api_error(e)
