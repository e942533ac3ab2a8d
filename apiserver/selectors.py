"""labelSelector and fieldSelector query parameters, parsed once, matched per object.

Label selectors take kube's string form (`a=b,c!=d,e in (x,y),f notin (z),g,!h`).
Field selectors take `field=value`, `field==value`, `field!=value`; the fields a
kind supports are those kube-apiserver supports for it (unknown fields are a
400, as in kube), and a missing field reads as "" (so `spec.nodeName=` selects
unassigned pods).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final


class SelectorError(ValueError):
    """A selector that cannot be parsed or names an unsupported field (HTTP 400)."""


Predicate = Callable[[Mapping[str, Any]], bool]

_TOKEN = re.compile(
    r"\s*(?:(?P<neg>!)\s*(?P<nkey>[^\s,!=()]+)"
    r"|(?P<key>[^\s,!=()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<val>[^\s,()]*)"
    r"|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?)\s*(?:,|$)"
)


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the label, as in kube.
        return not present or labels[self.key] not in self.values


def parse_label_selector(text: str) -> list[LabelRequirement]:
    out: list[LabelRequirement] = []
    pos, text = 0, text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SelectorError(f"unable to parse requirement: {text[pos:]!r}")
        pos = m.end()
        if m["nkey"]:
            out.append(LabelRequirement(m["nkey"], "!"))
        elif m["op"]:
            op = "!=" if m["op"] == "!=" else "="
            out.append(LabelRequirement(m["key"], op, frozenset([m["val"]])))
        elif m["setop"]:
            values = frozenset(v.strip() for v in m["set"].split(",") if v.strip())
            out.append(LabelRequirement(m["key"], m["setop"], values))
        else:
            out.append(LabelRequirement(m["key"], "exists"))
    return out


# Fields kube-apiserver allows in fieldSelector, per kind (besides metadata.name
# and metadata.namespace, which every kind allows).
_EVENT_FIELDS: Final = frozenset(
    {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    }
)
FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "Pod": frozenset(
        {
            "spec.nodeName",
            "spec.schedulerName",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "Node": frozenset({"spec.unschedulable"}),
    "Event": _EVENT_FIELDS,
    "events.k8s.io/Event": frozenset(
        {
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        }
    ),
    "Namespace": frozenset({"status.phase"}),
    "ReplicaSet": frozenset({"status.replicas"}),
}


def _field(obj: Mapping[str, Any], path: str) -> str:
    if path == "source":  # core Event: source.component
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str, kind: str) -> list[tuple[str, bool, str]]:
    """(field, equal, value) triples; `equal` is False for `!=`. `kind` is the kind, or
    `group/Kind` outside the core group."""
    allowed = FIELDS.get(kind, frozenset())
    out = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"([^=!]+?)\s*(==|=|!=)\s*(.*)", part)
        if m is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        name = m[1]
        if name not in ("metadata.name", "metadata.namespace") and name not in allowed:
            raise SelectorError(f"field label not supported: {name}")
        out.append((name, m[2] != "!=", m[3]))
    return out


def selector(label_text: str | None, field_text: str | None, kind: str) -> Predicate | None:
    """One predicate over whole objects, or None when nothing is selected on."""
    labels = parse_label_selector(label_text) if label_text else []
    fields = parse_field_selector(field_text, kind) if field_text else []
    if not labels and not fields:
        return None

    def match(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        have = meta.get("labels") or {}
        if not all(r.matches(have) for r in labels):
            return False
        return all((_field(obj, f) == v) == eq for f, eq, v in fields)

    return match
