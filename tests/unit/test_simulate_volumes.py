"""`troupe simulate` with storage: the scenarios in tests/fixtures/volumes,
through the real pipeline with the simulated PV controller and provisioner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from troupe.cli import main
from troupe.config import default_config
from troupe.plugins.registry import IN_TREE
from troupe.tools.simulate import format_table, load_objects, simulate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "volumes"

NOT_HELPFUL = " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.."
NO_VICTIMS = (
    " preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
)


def run(name: str) -> dict[str, Any]:
    result = simulate(load_objects([str(FIXTURES / name)]), default_config(IN_TREE))
    return result.to_json_obj()


def test_bound_pv_node_affinity_decides_the_node() -> None:
    pods = run("bound-pv-affinity.yaml")["pods"]
    # Already bound before the simulation: nothing to report under volumes.
    assert pods["default/db"] == {"node": "b", "reason": None, "preemptedBy": None}


def test_wait_for_first_consumer_claim_is_provisioned_on_the_chosen_node() -> None:
    pods = run("wffc-provisioned.yaml")["pods"]
    assert pods["default/app"] == {
        "node": "big",
        "preemptedBy": None,
        "reason": None,
        "volumes": {"data": {"pv": "pvc-6f1c", "provisioned": True}},
    }


def test_static_pv_is_matched_and_bound() -> None:
    pods = run("static-pv.yaml")["pods"]
    assert pods["default/db"] == {
        "node": "c",
        "preemptedBy": None,
        "reason": None,
        "volumes": {"data": {"pv": "local-c", "provisioned": False}},
    }


def test_unbound_immediate_claim_waits_with_kube_message() -> None:
    pods = run("immediate-unbound.yaml")["pods"]
    assert pods["default/app"] == {
        "node": None,
        "preemptedBy": None,
        "reason": "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims."
        + NOT_HELPFUL,
    }


def test_zone_conflict() -> None:
    pods = run("zone-conflict.yaml")["pods"]
    assert pods["default/wants-a"] == {
        "node": None,
        "preemptedBy": None,
        "reason": "0/2 nodes are available: 2 node(s) had no available volume zone." + NOT_HELPFUL,
    }
    assert pods["default/wants-c"]["node"] == "c1"


def test_read_write_once_pod_conflict() -> None:
    pods = run("rwop-conflict.yaml")["pods"]
    assert pods["default/holder"]["node"] == "a"
    assert pods["default/second"] == {
        "node": None,
        "preemptedBy": None,
        "reason": "0/2 nodes are available: 2 node has pod using PersistentVolumeClaim with the "
        "same name and ReadWriteOncePod access mode." + NO_VICTIMS,
    }


def test_csi_volume_limit() -> None:
    pods = run("csi-limit.yaml")["pods"]
    assert pods["default/app-3"] == {
        "node": None,
        "preemptedBy": None,
        "reason": "0/2 nodes are available: 2 node(s) exceed max volume count." + NO_VICTIMS,
    }


def test_table_shows_the_claims_bound_or_provisioned() -> None:
    def table(name: str) -> list[str]:
        objs = load_objects([str(FIXTURES / name)])
        return format_table(simulate(objs, default_config(IN_TREE))).splitlines()

    lines = table("wffc-provisioned.yaml")
    at = lines.index("POD          CLAIM  VOLUME")
    assert lines[at + 1] == "default/app  data   pvc-6f1c (provisioned)"
    assert "default/db  data   local-c (bound)" in table("static-pv.yaml")
    assert not any("CLAIM" in line for line in table("bound-pv-affinity.yaml"))


def test_cli_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-o", "json", str(FIXTURES / "wffc-provisioned.yaml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pods"]["default/app"]["volumes"] == {
        "data": {"pv": "pvc-6f1c", "provisioned": True}
    }


def test_every_fixture_loads() -> None:
    for path in sorted(FIXTURES.glob("*.yaml")):
        assert load_objects([str(path)]), path
