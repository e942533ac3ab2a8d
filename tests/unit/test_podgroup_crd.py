"""Our PodGroup CRD against scheduler-plugins' own (vendored in tests/fixtures/upstream):
it accepts every PodGroup upstream's accepts, and the status Troupe writes is valid
under both and survives structural pruning by either (so it is not lost on a cluster
that has upstream's CRD installed)."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.builders import make_pod
from troupe.api.parse import parse_pod, parse_pod_group
from troupe.api.types import Pod, PodGroup
from troupe.plugins.coscheduling.status import PHASES, compute_status

ROOT = Path(__file__).resolve().parent.parent.parent
OURS = ROOT / "crds" / "scheduling.x-k8s.io_podgroups.yaml"
UPSTREAM = ROOT / "tests" / "fixtures" / "upstream" / "scheduler-plugins.podgroups.crd.yaml"
# apis/scheduling/v1alpha1/types.go, PodGroupPhase, at the vendored commit.
UPSTREAM_PHASES = ("Pending", "Running", "Scheduling", "Unknown", "Finished", "Failed")
# Written by older scheduler-plugins releases; upstream's schema still accepts any string.
LEGACY_PHASES = ("PreScheduling", "Scheduled")


def crd(path: Path) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"
    return docs[0]


def schema_of(path: Path) -> dict[str, Any]:
    (version,) = [v for v in crd(path)["spec"]["versions"] if v["name"] == "v1alpha1"]
    return version["schema"]["openAPIV3Schema"]


SCHEMAS = {"upstream": schema_of(UPSTREAM), "ours": schema_of(OURS)}


def prune(obj: Any, schema: dict[str, Any], root: bool = False) -> Any:
    """Structural pruning as the API server applies it: fields the schema does not
    name are dropped (metadata, apiVersion and kind of the root are the server's)."""
    if not isinstance(obj, dict):
        return obj
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return copy.deepcopy(obj)
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    out: dict[str, Any] = {}
    for k, v in obj.items():
        if root and k in ("apiVersion", "kind", "metadata"):
            out[k] = copy.deepcopy(v)
        elif props is not None and k in props:
            out[k] = prune(v, props[k])
        elif isinstance(extra, dict):
            out[k] = prune(v, extra)
    return out


def accepts(schema: dict[str, Any], obj: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(obj, schema)
    except jsonschema.ValidationError:
        return False
    return True


def podgroup(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


# ---- the status Troupe writes ---------------------------------------------------------

PG = parse_pod_group(podgroup({"minMember": 2}))
assert isinstance(PG, PodGroup)


def member(i: int, phase: str, owned: bool) -> Pod:
    b = make_pod(f"p{i}").group("job")
    if phase != "Pending":
        b.node("n")
    raw = b.phase(phase).obj()
    if owned:
        raw["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u"}
        ]
    p = parse_pod(raw)
    assert isinstance(p, Pod)
    return p


def written_statuses() -> list[dict[str, Any]]:
    """compute_status over every mix of up to three members' phases, with and
    without owners and a start time: every phase Troupe can write."""
    out = []
    phases = ("Pending", "Running", "Succeeded", "Failed")
    for n in range(4):
        for mix in itertools.combinations_with_replacement(phases, n):
            for owned, started in ((False, None), (True, 1_700_000_000.0)):
                pods = [member(i, ph, owned) for i, ph in enumerate(mix)]
                out.append(compute_status(PG, pods, started))
    return out


STATUSES = written_statuses()


def test_every_phase_is_written_and_is_upstreams() -> None:
    assert {s["phase"] for s in STATUSES} == set(PHASES)
    assert set(PHASES) <= set(UPSTREAM_PHASES)


@pytest.mark.parametrize("which", ["upstream", "ours"])
def test_the_status_troupe_writes_is_valid_and_survives_pruning(which: str) -> None:
    schema = SCHEMAS[which]
    for status in STATUSES:
        obj = podgroup({"minMember": 2}, status)
        jsonschema.validate(obj, schema)
        assert prune(obj, schema, root=True) == obj, status
    assert any("occupiedBy" in s and "scheduleStartTime" in s for s in STATUSES)


# ---- everything upstream accepts, ours accepts ------------------------------------------

SAMPLES = [
    pytest.param(podgroup({}), id="empty-spec"),
    pytest.param(podgroup({"minMember": 1}), id="min-member-1"),
    pytest.param(podgroup({"minMember": 4, "scheduleTimeoutSeconds": 0}), id="timeout-0"),
    pytest.param(podgroup({"minMember": 4, "scheduleTimeoutSeconds": 30}), id="timeout-30"),
    pytest.param(podgroup({"scheduleTimeoutSeconds": -5}), id="timeout-negative"),
    pytest.param(podgroup({"scheduleTimeoutSeconds": 2147483647}), id="timeout-int32-max"),
    pytest.param(
        podgroup({"minMember": 2, "minResources": {"cpu": "500m", "memory": "1Gi"}}),
        id="min-resources-strings",
    ),
    pytest.param(
        podgroup({"minMember": 2, "minResources": {"cpu": 4, "nvidia.com/gpu": 8}}),
        id="min-resources-integers",
    ),
    pytest.param(podgroup({"minResources": {"cpu": "lots"}}), id="min-resources-bad"),
    pytest.param(podgroup({"minMember": 0}), id="min-member-0"),
    pytest.param(podgroup({"minMember": "4"}), id="min-member-string"),
    pytest.param(podgroup({"minMember": 3, "futureField": True}), id="unknown-spec-field"),
    *[
        pytest.param(podgroup({"minMember": 2}, {"phase": p}), id=f"phase-{p}")
        for p in (*UPSTREAM_PHASES, *LEGACY_PHASES)
    ],
    pytest.param(
        podgroup(
            {"minMember": 2},
            {
                "phase": "Running",
                "occupiedBy": "default/a,default/b",
                "running": 2,
                "succeeded": 0,
                "failed": 0,
                "scheduleStartTime": "2024-05-01T10:00:00Z",
            },
        ),
        id="full-status",
    ),
    pytest.param(
        podgroup({"minMember": 2}, {"phase": "Scheduled", "scheduled": 2}), id="legacy-status"
    ),
]


@pytest.mark.parametrize("obj", SAMPLES)
def test_ours_accepts_what_upstream_accepts_and_keeps_what_it_keeps(obj: dict[str, Any]) -> None:
    up, ours = SCHEMAS["upstream"], SCHEMAS["ours"]
    if accepts(up, obj):
        assert accepts(ours, obj)
        # what upstream's keeps, ours keeps (ours may keep more)
        kept = prune(obj, up, root=True)
        assert prune(prune(obj, ours, root=True), up, root=True) == kept
    else:  # not required, but a difference here would need a reason
        assert not accepts(ours, obj)


def test_the_samples_cover_both_verdicts() -> None:
    verdicts = {accepts(SCHEMAS["upstream"], p.values[0]) for p in SAMPLES}
    assert verdicts == {True, False}


CONSTRAINTS = (
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "pattern",
    "minLength",
    "maxLength",
    "required",
    "minProperties",
    "maxProperties",
    "x-kubernetes-validations",
)


def no_stricter(up: dict[str, Any], ours: dict[str, Any], path: str) -> list[str]:
    """Where ours differs from upstream's schema in a way that could refuse or drop
    something upstream's keeps."""
    problems = []
    for key in ("type", "format", "anyOf", "x-kubernetes-int-or-string"):
        if up.get(key) != ours.get(key):
            problems.append(f"{path}: {key} {ours.get(key)!r}, upstream {up.get(key)!r}")
    for key in CONSTRAINTS:
        if key in ours and ours[key] != up.get(key):
            problems.append(f"{path}: {key} {ours[key]!r} not upstream's {up.get(key)!r}")
    for name, sub in up.get("properties", {}).items():
        if name not in ours.get("properties", {}):
            problems.append(f"{path}.{name}: missing")
        else:
            problems += no_stricter(sub, ours["properties"][name], f"{path}.{name}")
    if isinstance(up.get("additionalProperties"), dict):
        problems += no_stricter(
            up["additionalProperties"], ours.get("additionalProperties") or {}, f"{path}.*"
        )
    return problems


def test_our_schema_is_no_stricter_than_upstreams() -> None:
    assert no_stricter(SCHEMAS["upstream"], SCHEMAS["ours"], "") == []


def test_the_comparison_sees_a_stricter_schema() -> None:
    stricter = copy.deepcopy(SCHEMAS["upstream"])
    spec = stricter["properties"]["spec"]["properties"]
    spec["scheduleTimeoutSeconds"]["minimum"] = 1
    stricter["properties"]["status"]["properties"]["phase"]["enum"] = ["Pending"]
    del stricter["properties"]["status"]["properties"]["occupiedBy"]
    assert no_stricter(SCHEMAS["upstream"], stricter, "") == [
        ".spec.scheduleTimeoutSeconds: minimum 1 not upstream's None",
        ".status.occupiedBy: missing",
        ".status.phase: enum ['Pending'] not upstream's None",
    ]


def test_names_scope_subresource_and_columns_match_upstream() -> None:
    up, ours = crd(UPSTREAM)["spec"], crd(OURS)["spec"]
    for key in ("group", "names", "scope"):
        assert ours[key] == up[key], key
    (v_up,) = up["versions"]
    (v_ours,) = ours["versions"]
    assert v_ours["subresources"] == v_up["subresources"] == {"status": {}}
    assert (v_ours["served"], v_ours["storage"]) == (True, True)
    columns = [(c["name"], c["jsonPath"]) for c in v_ours["additionalPrinterColumns"]]
    assert columns == [(c["name"], c["jsonPath"]) for c in v_up["additionalPrinterColumns"]]
