"""Small helpers for the cases ported from kube-scheduler's plugin tests
(pkg/scheduler/framework/plugins/*/..._test.go): the facts of each upstream case
written with our builders, the upstream test name in the case id."""

from __future__ import annotations

from typing import Any

from tests.builders import PodBuilder


def expr(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values is not None:
        e["values"] = list(values)
    return e


def pod_term(
    topology_key: str, *exprs: dict[str, Any], namespaces: list[str] | None = None
) -> dict[str, Any]:
    t: dict[str, Any] = {
        "labelSelector": {"matchExpressions": list(exprs)},
        "topologyKey": topology_key,
    }
    if namespaces is not None:
        t["namespaces"] = namespaces
    return t


def _add(pb: PodBuilder, kind: str, field: str, item: dict[str, Any]) -> PodBuilder:
    spec = pb._spec
    a = spec.setdefault("affinity", {}).setdefault(kind, {})
    a.setdefault(field, []).append(item)
    return pb


REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def affinity(pb: PodBuilder, term: dict[str, Any]) -> PodBuilder:
    """Required pod affinity term (st.PodAffinity*(..., st.PodAffinityWithRequiredReq))."""
    return _add(pb, "podAffinity", REQUIRED, term)


def anti(pb: PodBuilder, term: dict[str, Any]) -> PodBuilder:
    return _add(pb, "podAntiAffinity", REQUIRED, term)


def pref_affinity(pb: PodBuilder, weight: int, term: dict[str, Any]) -> PodBuilder:
    return _add(pb, "podAffinity", PREFERRED, {"weight": weight, "podAffinityTerm": term})


def pref_anti(pb: PodBuilder, weight: int, term: dict[str, Any]) -> PodBuilder:
    return _add(pb, "podAntiAffinity", PREFERRED, {"weight": weight, "podAffinityTerm": term})


def labels(pb: PodBuilder, **kv: str) -> PodBuilder:
    for k, v in kv.items():
        pb.label(k, v)
    return pb
