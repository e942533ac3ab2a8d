"""Configuration compatibility with kube-scheduler 1.37's workload scheduling:
the profile a 1.37 user writes for PodGroups (GangScheduling,
TopologyPlacementGenerator, PodGroupPodsCount; the placementGenerate,
placementScore and podGroupPostFilter plugin sets) decodes to the Troupe
profile it means (Coscheduling and its group cycle), and what Troupe cannot
honour is refused naming the field.

Upstream: staging/src/k8s.io/kube-scheduler/config/v1/types.go (`Plugins`:
placementGenerate, placementScore, podGroupPostFilter; `Plugin.weight` used
for score and placementScore), pkg/scheduler/framework/plugins/names/names.go,
gangscheduling/, topologyaware/ and podgrouppodscount/ (none takes arguments).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.plugins.conftest import make_handle
from troupe.config import ConfigError, SchedulerConfig, default_config, parse_config
from troupe.framework.runtime import Profile
from troupe.plugins.registry import IN_TREE

V1 = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}

# A kube-scheduler 1.37 configuration for workload scheduling, as its user writes it.
KUBE_1_37 = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: GangScheduling
      - name: TopologyPlacementGenerator
      - name: PodGroupPodsCount
    placementScore:
      enabled:
      - name: PodGroupPodsCount
        weight: 5
    podGroupPostFilter:
      enabled:
      - name: DefaultPreemption
  pluginConfig:
  - name: GangScheduling
    args: {}
"""


def one(plugins: dict[str, Any], **profile: Any) -> dict[str, Any]:
    return V1 | {"profiles": [{"plugins": plugins, **profile}]}


def parse(obj: object) -> SchedulerConfig:
    c = parse_config(obj, IN_TREE)
    for p in c.profiles:  # the plugins accept what the profile gives them
        Profile(p.scheduler_name, p.plugins, IN_TREE, make_handle())
    return c


def names(c: SchedulerConfig) -> dict[str, list[str]]:
    return {pt: [s.name for s in specs] for pt, specs in c.profiles[0].plugins.items()}


def coscheduling_args(c: SchedulerConfig) -> list[dict[str, Any]]:
    return [
        dict(s.args)
        for specs in c.profiles[0].plugins.values()
        for s in specs
        if s.name == "Coscheduling"
    ]


def refused(obj: object) -> str:
    with pytest.raises(ConfigError) as e:
        parse(obj)
    return str(e.value)


def test_a_1_37_workload_profile_is_coscheduling_with_its_weight() -> None:
    c = parse(yaml.safe_load(KUBE_1_37))
    want = default_config(IN_TREE)
    # The same plugins at the same points as Troupe's default profile, which
    # gang-schedules with Coscheduling ...
    assert names(c) == {pt: [s.name for s in v] for pt, v in want.profiles[0].plugins.items()}
    # ... with PodGroupPodsCount's placementScore weight as Coscheduling's.
    args = coscheduling_args(c)
    assert args and all(a == {"placementPodsCountWeight": 5} for a in args)


@pytest.mark.parametrize(
    ("plugins", "want"),
    [
        # multiPoint's weight when placementScore gives none; 0 or unset is 1
        ({"multiPoint": {"enabled": [{"name": "PodGroupPodsCount", "weight": 3}]}}, 3),
        ({"multiPoint": {"enabled": [{"name": "PodGroupPodsCount"}]}}, 1),
        ({"placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": 0}]}}, 1),
        # placementScore's entry wins over multiPoint's
        (
            {
                "multiPoint": {"enabled": [{"name": "PodGroupPodsCount", "weight": 3}]},
                "placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": 7}]},
            },
            7,
        ),
        # disabled: the pods-count score is off
        ({"placementScore": {"disabled": [{"name": "PodGroupPodsCount"}]}}, 0),
        ({"placementScore": {"disabled": [{"name": "*"}]}}, 0),
        ({"multiPoint": {"disabled": [{"name": "PodGroupPodsCount"}]}}, 0),
        # "*" with the plugin enabled again at the point keeps it
        (
            {
                "placementScore": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": "PodGroupPodsCount", "weight": 2}],
                }
            },
            2,
        ),
    ],
)
def test_pod_group_pods_count_sets_coschedulings_pods_count_weight(
    plugins: dict[str, Any], want: int
) -> None:
    args = coscheduling_args(parse(one(plugins)))
    assert args and all(a["placementPodsCountWeight"] == want for a in args)


def test_no_workload_plugin_named_leaves_coscheduling_as_configured() -> None:
    c = parse(
        one(
            {},
            pluginConfig=[{"name": "Coscheduling", "args": {"placementPodsCountWeight": 9}}],
        )
    )
    assert all(a == {"placementPodsCountWeight": 9} for a in coscheduling_args(c))


def test_a_matching_pods_count_weight_in_plugin_config_is_accepted() -> None:
    c = parse(
        one(
            {"placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": 4}]}},
            pluginConfig=[{"name": "Coscheduling", "args": {"placementPodsCountWeight": 4}}],
        )
    )
    assert all(a == {"placementPodsCountWeight": 4} for a in coscheduling_args(c))


def test_gang_scheduling_at_a_point_is_coscheduling_there() -> None:
    # A profile that names its plugins point by point, as a 1.37 user may.
    plugins = {
        "multiPoint": {"disabled": [{"name": "Coscheduling"}]},
        "queueSort": {"enabled": [{"name": "PrioritySort"}]},
        "preEnqueue": {"enabled": [{"name": "GangScheduling"}]},
        "permit": {"enabled": [{"name": "GangScheduling"}, {"name": "Coscheduling"}]},
    }
    got = names(parse(one(plugins)))
    assert "Coscheduling" in got["preEnqueue"] and got["permit"] == ["Coscheduling"]
    assert got["queueSort"] == ["PrioritySort"] and "Coscheduling" not in got["preFilter"]


def test_topology_placement_and_pods_count_need_the_group_cycle() -> None:
    plugins = {
        "multiPoint": {"disabled": [{"name": "Coscheduling"}]},
        "queueSort": {"enabled": [{"name": "PrioritySort"}]},
        "placementGenerate": {"enabled": [{"name": "TopologyPlacementGenerator"}]},
    }
    assert refused(one(plugins)) == (
        "profiles[0].plugins.placementGenerate.enabled[0].name: plugin "
        '"TopologyPlacementGenerator" is Coscheduling\'s group cycle in Troupe, which this '
        "profile does not enable"
    )


@pytest.mark.parametrize(
    ("plugins", "want"),
    [
        (
            {"multiPoint": {"disabled": [{"name": "GangScheduling"}]}},
            'profiles[0].plugins.multiPoint.disabled[0].name: plugin "GangScheduling" is '
            'Coscheduling in Troupe, which also sorts the queue: disable "Coscheduling" '
            "(and enable a queueSort plugin such as PrioritySort) instead",
        ),
        (
            {"placementGenerate": {"disabled": [{"name": "TopologyPlacementGenerator"}]}},
            "profiles[0].plugins.placementGenerate.disabled[0].name: plugin "
            '"TopologyPlacementGenerator" cannot be disabled in Troupe: Coscheduling\'s group '
            "cycle places a PodGroup with topology constraints in one domain whenever it runs",
        ),
        (
            {"podGroupPostFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
            "profiles[0].plugins.podGroupPostFilter.disabled[0].name: cannot be disabled in "
            "Troupe: a PostFilter plugin preempts for gangs wherever it runs at postFilter; "
            "disable it at postFilter instead",
        ),
        (
            {"placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": 101}]}},
            "profiles[0].plugins.placementScore.enabled[0].weight: Invalid value: 101: must "
            "be at most 100 in Troupe (Coscheduling's placementPodsCountWeight)",
        ),
        (
            {"placementScore": {"enabled": [{"name": "TopologyPlacementGenerator"}]}},
            "profiles[0].plugins.placementScore.enabled[0].name: plugin "
            '"TopologyPlacementGenerator" does not implement placementScore',
        ),
        (
            {"score": {"enabled": [{"name": "PodGroupPodsCount"}]}},
            'profiles[0].plugins.score.enabled[0].name: plugin "PodGroupPodsCount" does not '
            "implement score",
        ),
        (
            {"podGroupPostFilter": {"enabled": [{"name": "NodeResourcesFit"}]}},
            'profiles[0].plugins.podGroupPostFilter.enabled[0].name: plugin "NodeResourcesFit" '
            "does not implement podGroupPostFilter (Troupe's group preemption)",
        ),
        (
            {
                "postFilter": {"disabled": [{"name": "DefaultPreemption"}]},
                "podGroupPostFilter": {"enabled": [{"name": "DefaultPreemption"}]},
            },
            "profiles[0].plugins.podGroupPostFilter.enabled[0].name: plugin "
            '"DefaultPreemption" must also be enabled at postFilter: Troupe calls it there for '
            "pods and gangs alike",
        ),
        (
            {"multiPoint": {"enabled": [{"name": "DeferredPodScheduling"}]}},
            'profiles[0].plugins.multiPoint.enabled[0].name: plugin "DeferredPodScheduling" '
            "is a kube-scheduler plugin that Troupe does not have",
        ),
        (
            {"placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": "x"}]}},
            "profiles[0].plugins.placementScore.enabled[0].weight: Invalid value: "
            '"x": must be an integer',
        ),
    ],
)
def test_what_troupe_cannot_honour_is_refused_naming_the_field(
    plugins: dict[str, Any], want: str
) -> None:
    assert refused(one(plugins)) == want


def test_a_pods_count_weight_that_disagrees_with_plugin_config_is_refused() -> None:
    got = refused(
        one(
            {"placementScore": {"enabled": [{"name": "PodGroupPodsCount", "weight": 4}]}},
            pluginConfig=[{"name": "Coscheduling", "args": {"placementPodsCountWeight": 2}}],
        )
    )
    assert got == (
        "profiles[0].pluginConfig[0].args.placementPodsCountWeight: Invalid value: 2: "
        "disagrees with profiles[0].plugins.placementScore.enabled[0].weight (4), which "
        "sets it for PodGroupPodsCount"
    )


def test_placement_feasible_is_no_plugin_set() -> None:
    # GangScheduling's PlacementFeasible is called by name, not configured.
    got = refused(one({"placementFeasible": {"enabled": [{"name": "GangScheduling"}]}}))
    assert got == (
        'profiles[0].plugins.placementFeasible: unknown field (did you mean "placementGenerate"?)'
    )
