"""Configuration: defaults, multiPoint expansion, and errors that name the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.config import ConfigError, default_config, load_config, parse_config
from scheduler.framework.runtime import Profile, ProfileError
from scheduler.plugins.registry import IN_TREE
from tests.unit.plugins.conftest import make_handle

V1 = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def cfg(**fields: Any) -> dict[str, Any]:
    return {**V1, **fields}


def names(config: Any, point: str, profile: int = 0) -> list[str]:
    return [s.name for s in config.profiles[profile].plugins[point]]


def test_default_profile() -> None:
    c = default_config(IN_TREE)
    assert [p.scheduler_name for p in c.profiles] == ["troupe-scheduler"]
    assert names(c, "filter") == [
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
    ]
    weights = {s.name: s.weight for s in c.profiles[0].plugins["score"]}
    assert weights == {
        "TaintToleration": 3,
        "NodeAffinity": 2,
        "NodeResourcesFit": 1,
        "PodTopologySpread": 2,
        "InterPodAffinity": 2,
        "NodeResourcesBalancedAllocation": 1,
        "ImageLocality": 1,
    }
    assert names(c, "queueSort") == ["Coscheduling"]
    assert names(c, "permit") == ["Coscheduling"]
    assert names(c, "bind") == ["DefaultBinder"]
    assert names(c, "preEnqueue") == ["SchedulingGates", "Coscheduling"]
    assert c.pod_initial_backoff_seconds == 1 and c.pod_max_backoff_seconds == 10
    assert c.troupe.unschedulable_flush_seconds == 300


def test_disable_a_score_plugin_and_reweight() -> None:
    c = parse_config(
        cfg(
            profiles=[
                {
                    "plugins": {
                        "score": {
                            "disabled": [{"name": "ImageLocality"}],
                            "enabled": [{"name": "NodeResourcesFit", "weight": 5}],
                        }
                    }
                }
            ]
        ),
        IN_TREE,
    )
    weights = {s.name: s.weight for s in c.profiles[0].plugins["score"]}
    assert "ImageLocality" not in weights and weights["NodeResourcesFit"] == 5
    assert "NodeResourcesFit" in names(c, "filter")


def test_multi_point_disable_all_then_enable() -> None:
    c = parse_config(
        cfg(
            profiles=[
                {
                    "plugins": {
                        "multiPoint": {
                            "disabled": [{"name": "*"}],
                            "enabled": [
                                {"name": "PrioritySort"},
                                {"name": "NodeResourcesFit", "weight": 2},
                                {"name": "DefaultBinder"},
                            ],
                        }
                    }
                }
            ]
        ),
        IN_TREE,
    )
    assert names(c, "filter") == ["NodeResourcesFit"]
    assert [(s.name, s.weight) for s in c.profiles[0].plugins["score"]] == [("NodeResourcesFit", 2)]


def test_two_profiles_and_plugin_args() -> None:
    c = parse_config(
        cfg(
            profiles=[
                {"schedulerName": "a"},
                {
                    "schedulerName": "b",
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"scoringStrategy": {"type": "MostAllocated"}},
                        }
                    ],
                },
            ]
        ),
        IN_TREE,
    )
    fit = next(s for s in c.profiles[1].plugins["filter"] if s.name == "NodeResourcesFit")
    assert fit.args == {"scoringStrategy": {"type": "MostAllocated"}}
    assert fit.args_path == "profiles[1].pluginConfig[0].args"


def test_troupe_section() -> None:
    c = parse_config(
        cfg(
            troupe={
                "fifoFallback": {"enabled": False, "failureStreak": 7},
                "seed": 42,
                "gangGroupCycle": False,
            }
        ),
        IN_TREE,
    )
    assert not c.troupe.fifo_enabled and c.troupe.fifo_failure_streak == 7
    assert c.troupe.seed == 42 and not c.troupe.group_cycle


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (
            cfg(profiles=[{"plugins": {"filter": {"enabled": [{"name": "Foo"}]}}}]),
            'profiles[0].plugins.filter.enabled[0].name: unknown plugin "Foo"',
        ),
        (
            cfg(profiles=[{"plugins": {"score": {"enabled": [{"name": "PrioritySort"}]}}}]),
            'profiles[0].plugins.score.enabled[0]: plugin "PrioritySort" does not implement score',
        ),
        (
            cfg(percentageOfNodesToScore=120),
            "percentageOfNodesToScore: must be between 0 and 100, got 120",
        ),
        (
            cfg(podInitialBackoffSeconds=5, podMaxBackoffSeconds=2),
            "podMaxBackoffSeconds: must be greater than or equal to podInitialBackoffSeconds (5), "
            "got 2",
        ),
        (
            cfg(profiles=[{"schedulerName": "x"}, {"schedulerName": "x"}]),
            'profiles[1].schedulerName: duplicate "x"',
        ),
        (
            {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"},
            "apiVersion: expected kubescheduler.config.k8s.io/v1, got 'kubescheduler.config.k8s.io/"
            "v1beta3'",
        ),
        (cfg(bogus=1), "bogus: unknown field"),
        (
            cfg(profiles=[{"pluginConfig": [{"name": "Nope", "args": {}}]}]),
            'profiles[0].pluginConfig[0].name: unknown plugin "Nope"',
        ),
        (
            cfg(profiles=[{"plugins": {"queueSort": {"disabled": [{"name": "*"}]}}}]),
            "profiles[0].plugins.queueSort: exactly one queueSort plugin must be enabled, got 0",
        ),
        (
            cfg(profiles=[{"plugins": {"bind": {"disabled": [{"name": "*"}]}}}]),
            "profiles[0].plugins.bind: at least one bind plugin must be enabled",
        ),
        (
            cfg(
                profiles=[
                    {
                        "plugins": {
                            "filter": {"enabled": [{"name": "NodeName"}, {"name": "NodeName"}]}
                        }
                    }
                ]
            ),
            'profiles[0].plugins.filter.enabled[1].name: plugin "NodeName" is enabled twice',
        ),
        (
            cfg(
                profiles=[
                    {
                        "plugins": {
                            "score": {"enabled": [{"name": "ImageLocality", "weight": "high"}]}
                        }
                    }
                ]
            ),
            "profiles[0].plugins.score.enabled[0].weight: must be an integer, got 'high'",
        ),
        (
            cfg(troupe={"fifoFallback": {"failureStreak": 0}}),
            "troupe.fifoFallback.failureStreak: must be >= 1, got 0",
        ),
        (cfg(troupe={"speed": "max"}), "troupe.speed: unknown field"),
    ],
    ids=[
        "unknown-plugin",
        "wrong-point",
        "percentage",
        "backoff",
        "duplicate-profile",
        "api-version",
        "unknown-field",
        "plugin-config-unknown",
        "no-queue-sort",
        "no-bind",
        "enabled-twice",
        "weight-type",
        "fifo-streak",
        "troupe-unknown",
    ],
)
def test_errors_name_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(obj, IN_TREE)
    assert str(e.value) == message


def test_bad_plugin_args_stop_startup_naming_the_field() -> None:
    c = parse_config(
        cfg(
            profiles=[
                {
                    "pluginConfig": [
                        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Fancy"}}}
                    ]
                }
            ]
        ),
        IN_TREE,
    )
    p = c.profiles[0]
    with pytest.raises(ProfileError) as e:
        Profile(p.scheduler_name, p.plugins, IN_TREE, make_handle())
    assert str(e.value).startswith("profiles[0].pluginConfig[0].args.scoringStrategy.type: ")


def test_load_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml"):
        load_config(str(tmp_path / "nope.yaml"), IN_TREE)
    bad = tmp_path / "bad.yaml"
    bad.write_text("profiles: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: not valid YAML"):
        load_config(str(bad), IN_TREE)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("percentageOfNodesToScore: -1\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(wrong), IN_TREE)
    assert str(e.value) == (f"{wrong}: percentageOfNodesToScore: must be between 0 and 100, got -1")


def test_cli_reports_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from scheduler.cli import main

    f = tmp_path / "c.yaml"
    f.write_text("profiles: [{plugins: {score: {enabled: [{name: PrioritySort}]}}}]\n")
    assert main(["simulate", "--config", str(f), "tests/fixtures/sim/ports.yaml"]) == 2
    err = capsys.readouterr().err
    assert 'plugin "PrioritySort" does not implement score' in err


def test_kube_scheduler_queue_sort_instead_of_coscheduling() -> None:
    c = parse_config(
        cfg(
            profiles=[
                {
                    "plugins": {
                        "multiPoint": {
                            "disabled": [{"name": "Coscheduling"}],
                            "enabled": [{"name": "PrioritySort"}],
                        }
                    }
                }
            ]
        ),
        IN_TREE,
    )
    assert names(c, "queueSort") == ["PrioritySort"]
    assert names(c, "permit") == []
