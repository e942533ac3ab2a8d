"""Names as the API server validates them, and the kinds of resource names
the scheduler's plugins tell apart (kube-scheduler's v1helper and schedutil)."""

from __future__ import annotations

import re
from typing import Final

_NAME_RE: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def qualified_name_problem(value: str) -> str | None:
    """Why `value` is not a qualified name ([prefix/]name, as apimachinery's
    IsQualifiedName, which ValidateLabelName uses), or None."""
    prefix, slash, name = value.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN_RE.match(prefix)):
        return "prefix part must be a lowercase RFC 1123 subdomain"
    if not name or len(name) > 63 or not _NAME_RE.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "start and end with an alphanumeric character, and be at most 63 characters"
        )
    return None


def is_extended_resource(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a domain-prefixed name outside kubernetes.io."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def is_scalar_resource(name: str) -> bool:
    """schedutil.IsScalarResourceName: extended, hugepages-*, attachable-volumes-* or
    a kubernetes.io/-prefixed name. Scoring skips such a resource when the pod does
    not request it."""
    return (
        is_extended_resource(name)
        or name.startswith(("hugepages-", "attachable-volumes-"))
        or "kubernetes.io/" in name
    )
