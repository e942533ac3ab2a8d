"""TokenReview and SubjectAccessReview, as kube-apiserver answers their creates,
for the delegated authentication and authorization of Troupe's secure port.

Tokens: the server's own bearer token (`ApiServer(token=...)`) is the user
`admin` in `system:masters`; `ApiServer.add_user(name, groups)` hands out a
token for another user. Any other token is not authenticated. (The server's
own requests are still checked against its one token, or not at all: only
the reviews know these users.)

Authorization is RBAC evaluated from the objects in the store: members of
`system:masters` may do anything; otherwise a ClusterRoleBinding (or, for a
namespaced resource, a RoleBinding of the namespace) whose subjects name the
user (User), one of its groups (Group) or its service account
(`system:serviceaccount:<ns>:<name>`) grants what its role's rules grant:
`nonResourceURLs` (exact, `*`, or a prefix ending in `*`) with `verbs` for
non-resource requests; `apiGroups`, `resources` (`pods`, `pods/status`, `*`),
`resourceNames` and `verbs` for resource requests. Aggregated ClusterRoles
and deny rules are not evaluated (RBAC has none).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

Objects = Callable[[str, str | None], Iterable[Mapping[str, Any]]]
"""The store's objects of a plural (`clusterroles`) in a namespace (None: all)."""

MASTERS: Final = "system:masters"
GROUPS: Final = frozenset({"authentication.k8s.io", "authorization.k8s.io"})


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""


ADMIN: Final = User("admin", (MASTERS, "system:authenticated"))


def token_review(users: Mapping[str, User], body: Mapping[str, Any]) -> dict[str, Any]:
    """The TokenReview `body` with its status: who its token is, if anyone."""
    token = str((body.get("spec") or {}).get("token") or "")
    user = users.get(token) if token else None
    status: dict[str, Any]
    if user is None:
        status = {"authenticated": False, "user": {}, "error": "invalid bearer token"}
    else:
        info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            info["uid"] = user.uid
        status = {"authenticated": True, "user": info}
    return _answer(body, status)


def access_review(objects: Objects, body: Mapping[str, Any]) -> dict[str, Any]:
    """The SubjectAccessReview `body` with its status: allowed, with kube's reason."""
    spec = body.get("spec") or {}
    user = str(spec.get("user") or "")
    groups = {str(g) for g in spec.get("groups") or ()}
    if MASTERS in groups:
        return _answer(body, {"allowed": True})
    nonres = spec.get("nonResourceAttributes")
    res = spec.get("resourceAttributes")

    def grants(rule: Mapping[str, Any]) -> bool:
        if isinstance(nonres, Mapping):
            return _nonresource(rule, str(nonres.get("path") or ""), str(nonres.get("verb") or ""))
        if isinstance(res, Mapping):
            return _resource(rule, res)
        return False

    namespace = str(res.get("namespace") or "") if isinstance(res, Mapping) else ""
    bindings = [("ClusterRoleBinding", b) for b in objects("clusterrolebindings", None)]
    if namespace:
        bindings += [("RoleBinding", b) for b in objects("rolebindings", namespace)]
    for kind, binding in bindings:
        matched = [s for s in binding.get("subjects") or () if _names(s, user, groups)]
        if not matched:
            continue
        ref = binding.get("roleRef") or {}
        role_kind, role_name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        plural, ns = ("clusterroles", None) if role_kind == "ClusterRole" else ("roles", namespace)
        for role in objects(plural, ns):
            if (role.get("metadata") or {}).get("name") != role_name:
                continue
            if any(grants(rule) for rule in role.get("rules") or ()):
                subject = _describe(matched[0])
                reason = (
                    f'RBAC: allowed by {kind} "{binding["metadata"]["name"]}" of '
                    f'{role_kind} "{role_name}" to {subject}'
                )
                return _answer(body, {"allowed": True, "reason": reason})
    return _answer(body, {"allowed": False})


def _answer(body: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {"creationTimestamp": None},
        "spec": body.get("spec") or {},
        "status": dict(status),
    }


def _names(subject: Mapping[str, Any], user: str, groups: set[str]) -> bool:
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if kind == "User":
        return name == user
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        return user == f"system:serviceaccount:{subject.get('namespace') or ''}:{name}"
    return False


def _describe(subject: Mapping[str, Any]) -> str:
    """A subject as kube's RBAC reasons name it: `User "u"`, `ServiceAccount "name/ns"`."""
    name = str(subject.get("name") or "")
    if subject.get("kind") == "ServiceAccount":
        name = f"{name}/{subject.get('namespace') or ''}"
    return f'{subject.get("kind")} "{name}"'


def _has(values: Iterable[str] | None, value: str) -> bool:
    got = list(values or ())
    return "*" in got or value in got


def _nonresource(rule: Mapping[str, Any], path: str, verb: str) -> bool:
    if not _has(rule.get("verbs"), verb):
        return False
    for url in rule.get("nonResourceURLs") or ():
        if url == "*" or url == path or (url.endswith("*") and path.startswith(url[:-1])):
            return True
    return False


def _resource(rule: Mapping[str, Any], res: Mapping[str, Any]) -> bool:
    resource = str(res.get("resource") or "")
    if res.get("subresource"):
        resource += f"/{res['subresource']}"
    names = list(rule.get("resourceNames") or ())
    return (
        _has(rule.get("verbs"), str(res.get("verb") or ""))
        and _has(rule.get("apiGroups"), str(res.get("group") or ""))
        and _has(rule.get("resources"), resource)
        and (not names or str(res.get("name") or "") in names)
    )
