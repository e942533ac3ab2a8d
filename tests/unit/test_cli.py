"""The `troupe` command's argument errors: argparse's usage errors (exit 2)
and one line naming what is wrong, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from troupe import __version__
from troupe.api.kinds import SIMULATED
from troupe.cli import main


def test_leader_elect_takes_true_or_false_and_names_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--leader-elect", "yes"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "usage: troupe run" in err
    assert "argument --leader-elect: invalid choice: 'yes' (choose from 'true', 'false')" in err
    assert "Traceback" not in err


def test_a_missing_kubeconfig_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere" / "kubeconfig"
    assert main(["run", "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"troupe: --kubeconfig {missing}: No such file or directory\n"


def test_a_missing_kubeconfig_of_the_configuration_is_named_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "kubeconfig"
    config = tmp_path / "config.yaml"
    config.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection:\n  kubeconfig: {missing}\n"
    )
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == f"troupe: clientConnection.kubeconfig {missing}: No such file or directory\n"


@pytest.mark.parametrize("argv", [["--version"], ["version"]])
def test_version(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's version action exits
        rc = int(e.code or 0)
    assert rc == 0
    assert capsys.readouterr().out == f"{__version__}\n"


def test_simulate_help_names_every_kind_the_simulator_reads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The FILE help is made from the table of kinds (its `simulated` column),
    so a kind added there (ElasticQuota was missing) is listed."""
    with pytest.raises(SystemExit) as e:
        main(["simulate", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for kind in SIMULATED:
        plural = (
            kind[:-1] + "ies" if kind.endswith("y") else kind + ("es" if kind[-1] == "s" else "s")
        )
        assert plural in text, kind
    assert "ElasticQuotas" in text
