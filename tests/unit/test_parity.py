"""docs/parity.md holds true: its plugin table is Troupe's registry, default
profile and extension points, and covers kube-scheduler 1.37's default set.

kube-scheduler 1.37's default set is pkg/scheduler/apis/config/v1/
default_plugins.go's multiPoint list with what its applyFeatureGates adds for
gates on by default (DynamicResources before DefaultPreemption, weight 2;
NodeDeclaredFeatures appended)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

from troupe.api.types import NATIVE_POD_GROUP_VERSIONS
from troupe.framework.features import GATES
from troupe.framework.interface import EXTENSION_POINTS, implements
from troupe.plugins.registry import DEFAULT_MULTI_POINT, IN_TREE

DOC: Final = Path(__file__).resolve().parents[2] / "docs" / "parity.md"

KUBE_1_37_DEFAULTS: Final = {
    "SchedulingGates": None,
    "PrioritySort": None,
    "NodeUnschedulable": None,
    "NodeName": None,
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "NodePorts": None,
    "NodeResourcesFit": 1,
    "VolumeRestrictions": None,
    "NodeVolumeLimits": None,
    "VolumeBinding": None,
    "VolumeZone": None,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "DynamicResources": 2,
    "DefaultPreemption": None,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
    "DefaultBinder": None,
    "NodeDeclaredFeatures": None,
}
STATUSES: Final = ("done", "differs", "not yet")


def section(title: str) -> list[list[str]]:
    """The rows of the table under `## title` (header and rule left out)."""
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    body = text[start : end if end >= 0 else len(text)]
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in body.splitlines()
        if line.startswith("|")
    ]
    return rows[2:]


def name(cell: str) -> str:
    m = re.fullmatch(r"`([^`]+)`", cell)
    assert m, f"{cell!r}: a row's first cell is a `Name`"
    return m.group(1)


def points(cell: str) -> list[str]:
    return [] if cell == "—" else [p.strip() for p in cell.split(",")]


def plugin_rows() -> dict[str, list[str]]:
    rows = {name(r[0]): r for r in section("Plugins")}
    assert len(rows) == len(section("Plugins")), "a plugin has two rows"
    return rows


def test_every_row_has_a_status() -> None:
    for title in ("Plugins", "Extension points", "Feature gates"):
        for row in section(title):
            assert row[-1].startswith(STATUSES), row


def test_the_plugins_are_the_registry() -> None:
    troupe = {n for n, r in plugin_rows().items() if not r[-1].startswith("not yet")}
    assert troupe == set(IN_TREE)


def test_the_troupe_default_column_is_the_default_profile() -> None:
    rows = plugin_rows()
    assert {n for n, r in rows.items() if r[4] == "yes"} == {s.name for s in DEFAULT_MULTI_POINT}
    assert {r[4] for r in rows.values()} <= {"yes", "no", "—"}


def test_the_troupe_points_are_what_each_plugin_implements() -> None:
    for n, row in plugin_rows().items():
        cls = IN_TREE.get(n)
        want = [] if cls is None else [p for p in EXTENSION_POINTS if implements(cls, p)]
        assert sorted(points(row[3])) == sorted(want), n


def test_kube_schedulers_default_set_has_its_rows() -> None:
    rows = plugin_rows()
    for n, weight in KUBE_1_37_DEFAULTS.items():
        assert rows[n][2] == ("yes" if weight is None else f"yes ({weight})"), n
    others = {n for n, r in rows.items() if r[2].startswith("yes")} - set(KUBE_1_37_DEFAULTS)
    assert others == set()


def test_every_configuration_point_has_a_row() -> None:
    rows = {name(r[0]): r for r in section("Extension points")}
    for point in ("multiPoint", *EXTENSION_POINTS):
        assert rows[point][-1] == "done", point


def test_the_gates_troupe_implements_are_done() -> None:
    rows = {name(r[0]): r for r in section("Feature gates")}
    for gate in GATES:
        assert rows[gate][-1].startswith("done"), gate


def test_the_api_versions_troupe_reads_are_done() -> None:
    # k8s.io/api scheduling/ of 1.37: v1beta1 and v1alpha3 (v1alpha2 is 1.36's).
    rows = {r[0]: r for r in section("API versions")}
    for version in NATIVE_POD_GROUP_VERSIONS:
        assert rows[f"`{version}` PodGroup"][-1].startswith("done"), version
    assert rows["`v1alpha3` CompositePodGroup"][-1].startswith("done")
