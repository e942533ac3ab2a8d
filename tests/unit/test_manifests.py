"""The manifests we ship, checked in the test suite as `make manifests-check` does."""

from __future__ import annotations

import pytest

from tests import manifests_check


def test_issue14_manifests_validate_and_agree(capsys: pytest.CaptureFixture[str]) -> None:
    """#14.12: the Lease rule by resourceNames, a PodDisruptionBudget and
    anti-affinity for the two replicas, /livez and /readyz probes; every
    manifest valid against Kubernetes' schemas (strict) and our CRD."""
    assert manifests_check.main() == 0
    out = capsys.readouterr().out
    assert "OK   manifests: Lease RBAC, probes, PodDisruptionBudget and anti-affinity agree" in out
    assert "FAIL" not in out
