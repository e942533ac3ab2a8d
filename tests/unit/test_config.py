"""Configuration: defaults, multiPoint expansion as kube-scheduler, the troupe
section, files, and errors that name the field.

Most tables run against a small fake registry, so that they say what the
expansion does independently of the in-tree plugins; a few tests use the real
IN_TREE registry and build the real runtime Profile from the result.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from tests.unit.plugins.conftest import make_handle
from troupe.config import (
    DEFAULT_SCHEDULER_NAME,
    FAST_PARSER,
    ClientConnection,
    ConfigError,
    LeaderElection,
    SchedulerConfig,
    TroupeSettings,
    default_config,
    load_config,
    load_yaml_documents,
    parse_config,
)
from troupe.framework.interface import (
    BindPlugin,
    EnqueueExtensions,
    FilterPlugin,
    NodeFilterPlugin,
    NodeScorePlugin,
    PermitPlugin,
    PluginSpec,
    PostFilterPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from troupe.framework.runtime import Profile, ProfileError
from troupe.plugins.registry import IN_TREE

FIXTURES = Path(__file__).parent.parent / "fixtures" / "config"
V1 = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


# ---- a fake registry -------------------------------------------------------------------
# Each class says which points it serves by the Protocols it subclasses, as plugins do.


class Sort(QueueSortPlugin):
    NAME: Final = "Sort"


class OtherSort(QueueSortPlugin):
    NAME: Final = "OtherSort"


class Gate(PreEnqueuePlugin):
    NAME: Final = "Gate"


class Fit(PreFilterPlugin, FilterPlugin, ScorePlugin, EnqueueExtensions):
    NAME: Final = "Fit"


class Spread(PreFilterPlugin, FilterPlugin, ScorePlugin):
    NAME: Final = "Spread"


class Image(ScorePlugin):
    NAME: Final = "Image"


class PerNode(NodeFilterPlugin, NodeScorePlugin):
    NAME: Final = "PerNode"


class Gang(PreEnqueuePlugin, PostFilterPlugin, ReservePlugin, PermitPlugin):
    NAME: Final = "Gang"


class Binder(BindPlugin):
    NAME: Final = "Binder"


class OtherBinder(BindPlugin):
    NAME: Final = "OtherBinder"


FAKE: Final[dict[str, type]] = {
    c.NAME: c
    for c in (Sort, OtherSort, Gate, Fit, Spread, Image, PerNode, Gang, Binder, OtherBinder)
}
FAKE_DEFAULTS: Final = (
    PluginSpec("Sort"),
    PluginSpec("Gate"),
    PluginSpec("Fit", weight=1),
    PluginSpec("Spread", weight=2),
    PluginSpec("Image", weight=3),
    PluginSpec("Binder"),
)


def cfg(**fields: Any) -> dict[str, Any]:
    return {**V1, **fields}


def one(plugins: dict[str, Any] | None = None, **profile: Any) -> dict[str, Any]:
    """A configuration with one profile."""
    return cfg(profiles=[{**({"plugins": plugins} if plugins else {}), **profile}])


def fake(obj: object) -> SchedulerConfig:
    return parse_config(obj, FAKE, FAKE_DEFAULTS)


def layout(c: SchedulerConfig, profile: int = 0) -> dict[str, list[str]]:
    """The non-empty points; score entries as "Name*weight"."""
    out: dict[str, list[str]] = {}
    for point, specs in c.profiles[profile].plugins.items():
        if specs:
            out[point] = [f"{s.name}*{s.weight}" if point == "score" else s.name for s in specs]
    return out


FAKE_DEFAULT_LAYOUT: Final = {
    "preEnqueue": ["Gate"],
    "queueSort": ["Sort"],
    "preFilter": ["Fit", "Spread"],
    "filter": ["Fit", "Spread"],
    "score": ["Fit*1", "Spread*2", "Image*3"],
    "bind": ["Binder"],
}


# ---- defaults ----------------------------------------------------------------------------


def test_defaults_expand_the_multi_point_set_at_every_point_a_plugin_implements() -> None:
    c = default_config(FAKE, FAKE_DEFAULTS)
    assert [p.scheduler_name for p in c.profiles] == [DEFAULT_SCHEDULER_NAME]
    assert layout(c) == FAKE_DEFAULT_LAYOUT
    p = c.profiles[0]
    assert set(p.plugins) == {
        "preEnqueue",
        "queueSort",
        "preFilter",
        "filter",
        "postFilter",
        "preScore",
        "score",
        "reserve",
        "permit",
        "preBind",
        "bind",
        "postBind",
    }
    assert p.percentage_of_nodes_to_score is None
    assert all(s.args == {} and s.args_path == "" for specs in p.plugins.values() for s in specs)
    assert (c.percentage_of_nodes_to_score, c.pod_initial_backoff_seconds) == (0, 1.0)
    assert c.pod_max_backoff_seconds == 10.0
    assert c.troupe == TroupeSettings()


@pytest.mark.parametrize(
    "obj",
    [None, {}, V1, cfg(profiles=[]), cfg(profiles=None), cfg(profiles=[{}]), cfg(troupe={})],
    ids=["none", "empty", "type-only", "no-profiles", "null-profiles", "empty-profile", "troupe"],
)
def test_empty_documents_read_as_the_defaults(obj: object) -> None:
    assert fake(obj) == default_config(FAKE, FAKE_DEFAULTS)


def test_in_tree_defaults() -> None:
    c = default_config(IN_TREE)
    assert layout(c) == {
        "preEnqueue": ["SchedulingGates", "Coscheduling", "DynamicResources"],
        "queueSort": ["Coscheduling"],
        "preFilter": [
            "Coscheduling",
            "NodeName",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
        ],
        "filter": [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
        ],
        "postFilter": ["Coscheduling", "DynamicResources", "DefaultPreemption"],
        "preScore": [
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "VolumeBinding",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeResourcesBalancedAllocation",
            "ImageLocality",
        ],
        "score": [
            "TaintToleration*3",
            "NodeAffinity*2",
            "NodeResourcesFit*1",
            "VolumeBinding*1",
            "PodTopologySpread*2",
            "InterPodAffinity*2",
            "DynamicResources*2",
            "NodeResourcesBalancedAllocation*1",
            "ImageLocality*1",
        ],
        "reserve": ["Coscheduling", "VolumeBinding", "DynamicResources"],
        "permit": ["Coscheduling"],
        "preBind": ["VolumeBinding", "DynamicResources"],
        "bind": ["DefaultBinder"],
        "postBind": ["Coscheduling"],
    }
    p = c.profiles[0]
    Profile(p.scheduler_name, p.plugins, IN_TREE, make_handle())


def test_the_default_multi_point_set_is_the_in_tree_one() -> None:
    assert parse_config({}, IN_TREE) == default_config(IN_TREE)
    assert load_config(None, IN_TREE) == default_config(IN_TREE)


# ---- multiPoint expansion and per-point overrides ---------------------------------------


def changed(**points: list[str]) -> dict[str, list[str]]:
    """The fake default layout with some points replaced (an empty list drops one)."""
    out = {**FAKE_DEFAULT_LAYOUT, **points}
    return {k: v for k, v in out.items() if v}


EXPANSION_CASES: Final[list[tuple[str, dict[str, Any], dict[str, list[str]]]]] = [
    (
        "multi-point-disable-all-then-enable",
        {
            "multiPoint": {
                "disabled": [{"name": "*"}],
                "enabled": [{"name": "Sort"}, {"name": "Spread", "weight": 4}, {"name": "Binder"}],
            }
        },
        {
            "queueSort": ["Sort"],
            "preFilter": ["Spread"],
            "filter": ["Spread"],
            "score": ["Spread*4"],
            "bind": ["Binder"],
        },
    ),
    (
        "multi-point-disable-one-everywhere",
        {"multiPoint": {"disabled": [{"name": "Fit"}]}},
        changed(preFilter=["Spread"], filter=["Spread"], score=["Spread*2", "Image*3"]),
    ),
    (
        "multi-point-reweight-keeps-the-default-position",
        {"multiPoint": {"enabled": [{"name": "Fit", "weight": 9}]}},
        changed(score=["Fit*9", "Spread*2", "Image*3"]),
    ),
    (
        "multi-point-re-enable-without-weight-means-1",
        {"multiPoint": {"enabled": [{"name": "Image"}]}},
        changed(score=["Fit*1", "Spread*2", "Image*1"]),
    ),
    (
        "multi-point-new-plugin-goes-last-at-each-of-its-points",
        {"multiPoint": {"enabled": [{"name": "Gang"}, {"name": "PerNode", "weight": 5}]}},
        changed(
            preEnqueue=["Gate", "Gang"],
            filter=["Fit", "Spread", "PerNode"],
            postFilter=["Gang"],
            score=["Fit*1", "Spread*2", "Image*3", "PerNode*5"],
            reserve=["Gang"],
            permit=["Gang"],
        ),
    ),
    (
        "multi-point-disabled-then-enabled-moves-last",
        {"multiPoint": {"disabled": [{"name": "Fit"}], "enabled": [{"name": "Fit"}]}},
        changed(
            preFilter=["Spread", "Fit"],
            filter=["Spread", "Fit"],
            score=["Spread*2", "Image*3", "Fit*1"],
        ),
    ),
    (
        "point-disable-one-only-there",
        {"score": {"disabled": [{"name": "Fit"}]}},
        changed(score=["Spread*2", "Image*3"]),
    ),
    (
        "point-disable-all-keeps-its-own-enabled",
        {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "Image"}, {"name": "Fit"}]}},
        changed(score=["Image*1", "Fit*1"]),
    ),
    (
        "point-disable-all-also-drops-profile-multi-point-plugins",
        {
            "multiPoint": {"enabled": [{"name": "PerNode"}]},
            "filter": {"disabled": [{"name": "*"}]},
        },
        changed(filter=[], score=["Fit*1", "Spread*2", "Image*3", "PerNode*1"]),
    ),
    (
        "point-enable-of-a-multi-point-plugin-overrides-and-goes-first",
        {"filter": {"enabled": [{"name": "Spread"}]}},
        changed(filter=["Spread", "Fit"]),
    ),
    (
        "point-enable-of-another-plugin-goes-last",
        {"filter": {"enabled": [{"name": "PerNode"}, {"name": "Spread"}]}},
        changed(filter=["Spread", "Fit", "PerNode"]),
    ),
    (
        "score-weight-of-the-point-wins-over-multi-point",
        {
            "multiPoint": {"enabled": [{"name": "Image", "weight": 7}]},
            "score": {"enabled": [{"name": "Image", "weight": 5}]},
        },
        changed(score=["Image*5", "Fit*1", "Spread*2"]),
    ),
    (
        "score-enable-without-weight-means-1-not-the-default-weight",
        {"score": {"enabled": [{"name": "Image"}]}},
        changed(score=["Image*1", "Fit*1", "Spread*2"]),
    ),
    (
        "weight-0-means-1",
        {"score": {"enabled": [{"name": "Spread", "weight": 0}]}},
        changed(score=["Spread*1", "Fit*1", "Image*3"]),
    ),
    (
        "point-disabled-and-enabled-moves-last-with-its-weight",
        {"score": {"disabled": [{"name": "Fit"}], "enabled": [{"name": "Fit", "weight": 6}]}},
        changed(score=["Spread*2", "Image*3", "Fit*6"]),
    ),
    (
        "replace-the-binder",
        {"bind": {"disabled": [{"name": "Binder"}], "enabled": [{"name": "OtherBinder"}]}},
        changed(bind=["OtherBinder"]),
    ),
    (
        "replace-the-queue-sort-everywhere",
        {"multiPoint": {"disabled": [{"name": "Sort"}], "enabled": [{"name": "OtherSort"}]}},
        changed(queueSort=["OtherSort"]),
    ),
]


@pytest.mark.parametrize(
    ("plugins", "want"),
    [c[1:] for c in EXPANSION_CASES],
    ids=[c[0] for c in EXPANSION_CASES],
)
def test_expansion(plugins: dict[str, Any], want: dict[str, list[str]]) -> None:
    assert layout(fake(one(plugins))) == want


def test_weights_at_other_points_are_ignored() -> None:
    c = fake(one({"multiPoint": {"enabled": [{"name": "Binder", "weight": 9}]}}))
    assert [(s.name, s.weight) for s in c.profiles[0].plugins["bind"]] == [("Binder", 1)]
    c = fake(one({"filter": {"enabled": [{"name": "Fit", "weight": 9}]}}))
    assert [s.weight for s in c.profiles[0].plugins["filter"]] == [1, 1]
    assert layout(c)["score"] == ["Fit*1", "Spread*2", "Image*3"]


def test_kube_scheduler_queue_sort_instead_of_coscheduling() -> None:
    c = parse_config(
        one(
            {
                "multiPoint": {
                    "disabled": [{"name": "Coscheduling"}],
                    "enabled": [{"name": "PrioritySort"}],
                }
            }
        ),
        IN_TREE,
    )
    got = layout(c)
    assert got["queueSort"] == ["PrioritySort"]
    assert got["preEnqueue"] == ["SchedulingGates", "DynamicResources"]
    assert "permit" not in got and got["postFilter"] == ["DynamicResources", "DefaultPreemption"]


# ---- profiles and plugin args ------------------------------------------------------------


def test_two_profiles_each_with_their_own_plugins_and_args() -> None:
    c = fake(
        cfg(
            percentageOfNodesToScore=30,
            profiles=[
                {"schedulerName": "spread"},
                {
                    "schedulerName": "pack",
                    "percentageOfNodesToScore": 100,
                    "plugins": {
                        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "Fit"}]}
                    },
                    "pluginConfig": [
                        {"name": "Image", "args": {"x": 1}},
                        {"name": "Fit", "args": {"strategy": "MostAllocated"}},
                    ],
                },
            ],
        )
    )
    spread, pack = c.profiles
    assert c.profile("pack") is pack and c.profile("spread") is spread
    assert c.profile("nobody") is None
    assert layout(c, 0) == FAKE_DEFAULT_LAYOUT
    assert layout(c, 1) == changed(score=["Fit*1"])
    assert (c.percentage_of_nodes_to_score, spread.percentage_of_nodes_to_score) == (30, None)
    assert pack.percentage_of_nodes_to_score == 100
    # The same args, with where they came from, at every point the plugin serves.
    for point in ("preFilter", "filter", "score"):
        fit = next(s for s in pack.plugins[point] if s.name == "Fit")
        assert fit.args == {"strategy": "MostAllocated"}
        assert fit.args_path == "profiles[1].pluginConfig[1].args"
    assert all(s.args == {} for specs in spread.plugins.values() for s in specs)
    # Args of a registered plugin the profile does not enable are accepted.
    assert all(s.name != "Image" for s in pack.plugins["score"])


def test_args_typed_as_kube_scheduler_dumps_them_are_untyped() -> None:
    c = fake(
        one(
            pluginConfig=[
                {
                    "name": "Fit",
                    "args": {
                        "apiVersion": "kubescheduler.config.k8s.io/v1",
                        "kind": "FitArgs",
                        "a": 1,
                    },
                }
            ]
        )
    )
    assert c.profiles[0].plugins["filter"][0].args == {"a": 1}


def test_kube_scheduler_plugins_troupe_lacks_may_be_disabled_or_configured() -> None:
    c = fake(
        one(
            {
                "multiPoint": {"disabled": [{"name": "DefaultPreemption"}]},
                "filter": {"disabled": [{"name": "VolumeBinding"}]},
            },
            pluginConfig=[{"name": "DefaultPreemption", "args": {"minCandidateNodesAbsolute": 5}}],
        )
    )
    assert layout(c) == FAKE_DEFAULT_LAYOUT


def test_troupe_section() -> None:
    c = fake(
        cfg(
            troupe={
                "fifoFallback": {
                    "enabled": False,
                    "minQueueLength": 0,
                    "failureStreak": 7,
                    "durationSeconds": 1.5,
                },
                "unschedulableFlushSeconds": 60,
                "assumedPodTTLSeconds": 30,
                "seed": 42,
                "gangGroupCycle": False,
                "podGroupStatusCoalesceSeconds": 0,
                "metricsPort": 8080,
            }
        )
    )
    assert c.troupe == TroupeSettings(
        fifo_enabled=False,
        fifo_min_queue_length=0,
        fifo_failure_streak=7,
        fifo_duration_seconds=1.5,
        unschedulable_flush_seconds=60.0,
        assumed_pod_ttl_seconds=30.0,
        seed=42,
        group_cycle=False,
        podgroup_status_coalesce_seconds=0.0,
        metrics_port=8080,
    )
    partial = fake(cfg(troupe={"fifoFallback": {"failureStreak": 3}}))
    assert partial.troupe == TroupeSettings(fifo_failure_streak=3)


def test_kube_scheduler_fields_without_effect_are_checked_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="troupe.config"):
        c = fake(
            cfg(
                parallelism=16,
                enableProfiling=False,
                delayCacheUntilActive=True,
                extenders=[],
            )
        )
    assert c == default_config(FAKE, FAKE_DEFAULTS)
    assert caplog.messages == [
        "configuration: parallelism, enableProfiling, delayCacheUntilActive ignored: "
        "no effect in Troupe"
    ]


def test_leader_election_and_client_connection_are_honored() -> None:
    c = fake(
        cfg(
            leaderElection={
                "leaderElect": False,
                "leaseDuration": "30s",
                "renewDeadline": "20s",
                "retryPeriod": "500ms",
                "resourceLock": "leases",
                "resourceName": "my-scheduler",
                "resourceNamespace": "sched",
            },
            clientConnection={
                "kubeconfig": "/etc/kube/config",
                "qps": 200,
                "burst": 400,
                "contentType": "application/json",
                "acceptContentTypes": "application/json",
            },
        )
    )
    assert c.leader_election == LeaderElection(
        leader_elect=False,
        lease_duration=30.0,
        renew_deadline=20.0,
        retry_period=0.5,
        resource_name="my-scheduler",
        resource_namespace="sched",
    )
    assert c.client_connection == ClientConnection("/etc/kube/config", 200.0, 400)
    assert fake(cfg()).leader_election == LeaderElection()
    assert (
        fake(
            cfg(leaderElection={"leaseDuration": "1h2m3s", "renewDeadline": "1m"})
        ).leader_election.lease_duration
        == 3723.0
    )


# ---- errors ------------------------------------------------------------------------------

ERROR_CASES: Final[list[tuple[str, object, str]]] = [
    # the document
    ("not-an-object", [1], "Invalid value: array: must be a KubeSchedulerConfiguration object"),
    (
        "api-version",
        {"apiVersion": "kubescheduler.config.k8s.io/v1beta3"},
        'apiVersion: Unsupported value: "kubescheduler.config.k8s.io/v1beta3": supported values: '
        '"kubescheduler.config.k8s.io/v1"',
    ),
    (
        "kind",
        {**V1, "kind": "Policy"},
        'kind: Unsupported value: "Policy": supported values: "KubeSchedulerConfiguration"',
    ),
    ("unknown-field", cfg(bogus=1), "bogus: unknown field"),
    (
        "unknown-field-suggestion",
        cfg(profile=[]),
        'profile: unknown field (did you mean "profiles"?)',
    ),
    ("extenders", cfg(extenders=[{"urlPrefix": "http://x"}]), "extenders: not supported by Troupe"),
    (
        "parallelism",
        cfg(parallelism=0),
        "parallelism: Invalid value: 0: must be greater than or equal to 1",
    ),
    (
        "leader-election-field",
        cfg(leaderElection={"leaseDurationSeconds": 15}),
        'leaderElection.leaseDurationSeconds: unknown field (did you mean "leaseDuration"?)',
    ),
    (
        "leader-election-duration",
        cfg(leaderElection={"leaseDuration": 15}),
        'leaderElection.leaseDuration: Invalid value: 15: must be a duration such as "15s"',
    ),
    (
        "leader-election-duration-text",
        cfg(leaderElection={"retryPeriod": "2 s"}),
        'leaderElection.retryPeriod: Invalid value: "2 s": must be a duration such as "15s"',
    ),
    (
        "leader-election-order",
        cfg(leaderElection={"leaseDuration": "10s", "renewDeadline": "10s"}),
        "leaderElection.leaseDuration: must be greater than renewDeadline",
    ),
    (
        "leader-election-retry",
        cfg(leaderElection={"renewDeadline": "2s", "retryPeriod": "2s"}),
        "leaderElection.renewDeadline: must be greater than retryPeriod*1.2",
    ),
    (
        "leader-election-lock",
        cfg(leaderElection={"resourceLock": "endpointsleases"}),
        'leaderElection.resourceLock: Unsupported value: "endpointsleases": supported values: '
        '"leases"',
    ),
    (
        "client-connection-protobuf",
        cfg(clientConnection={"contentType": "application/vnd.kubernetes.protobuf"}),
        'clientConnection.contentType: Unsupported value: "application/vnd.kubernetes.protobuf": '
        'supported values: "application/json", "*/*"',
    ),
    (
        "client-connection-qps",
        cfg(clientConnection={"qps": -1}),
        "clientConnection.qps: Invalid value: -1: must be a positive number",
    ),
    (
        "client-connection-burst",
        cfg(clientConnection={"burst": 0}),
        "clientConnection.burst: Invalid value: 0: must be greater than or equal to 1",
    ),
    # global numbers
    (
        "percentage",
        cfg(percentageOfNodesToScore=120),
        "percentageOfNodesToScore: Invalid value: 120: must be between 0 and 100, inclusive",
    ),
    (
        "percentage-type",
        cfg(percentageOfNodesToScore="50%"),
        'percentageOfNodesToScore: Invalid value: "50%": must be an integer',
    ),
    (
        "percentage-bool",
        cfg(percentageOfNodesToScore=True),
        "percentageOfNodesToScore: Invalid value: true: must be an integer",
    ),
    (
        "initial-backoff",
        cfg(podInitialBackoffSeconds=0),
        "podInitialBackoffSeconds: Invalid value: 0: must be greater than or equal to 1",
    ),
    (
        "backoff-float",
        cfg(podMaxBackoffSeconds=2.5),
        "podMaxBackoffSeconds: Invalid value: 2.5: must be an integer",
    ),
    (
        "backoff-order",
        cfg(podInitialBackoffSeconds=5, podMaxBackoffSeconds=2),
        "podMaxBackoffSeconds: Invalid value: 2: must be greater than or equal to "
        "podInitialBackoffSeconds (5)",
    ),
    # profiles
    ("profiles-type", cfg(profiles={"a": 1}), "profiles: Invalid value: object: must be a list"),
    ("profile-type", cfg(profiles=["x"]), 'profiles[0]: Invalid value: "x": must be an object'),
    (
        "duplicate-profile",
        cfg(profiles=[{"schedulerName": "x"}, {"schedulerName": "x"}]),
        'profiles[1].schedulerName: Duplicate value: "x"',
    ),
    (
        "unnamed-profile-among-several",
        cfg(profiles=[{"schedulerName": "x"}, {}]),
        "profiles[1].schedulerName: Required value: a profile must be named when there are several",
    ),
    ("empty-name", one(schedulerName=""), "profiles[0].schedulerName: Required value"),
    (
        "profile-percentage",
        one(percentageOfNodesToScore=-1),
        "profiles[0].percentageOfNodesToScore: Invalid value: -1: must be between 0 and 100, "
        "inclusive",
    ),
    (
        "unknown-point",
        one({"filters": {}}),
        'profiles[0].plugins.filters: unknown field (did you mean "filter"?)',
    ),
    (
        "unknown-plugin-set-field",
        one({"filter": {"enable": []}}),
        'profiles[0].plugins.filter.enable: unknown field (did you mean "enabled"?)',
    ),
    (
        "unknown-plugin",
        one({"filter": {"enabled": [{"name": "Fit"}, {"name": "Foo"}]}}),
        'profiles[0].plugins.filter.enabled[1].name: unknown plugin "Foo"',
    ),
    (
        "unknown-plugin-suggestion",
        one({"multiPoint": {"enabled": [{"name": "Spraed"}]}}),
        'profiles[0].plugins.multiPoint.enabled[0].name: unknown plugin "Spraed" '
        '(did you mean "Spread"?)',
    ),
    (
        "kube-plugin-enabled",
        one({"postFilter": {"enabled": [{"name": "DefaultPreemption"}]}}),
        'profiles[0].plugins.postFilter.enabled[0].name: plugin "DefaultPreemption" is a '
        "kube-scheduler plugin that Troupe does not have",
    ),
    (
        "unknown-plugin-disabled",
        one({"score": {"disabled": [{"name": "Imag"}]}}),
        'profiles[0].plugins.score.disabled[0].name: unknown plugin "Imag" (did you mean "Image"?)',
    ),
    (
        "plugin-name-missing",
        one({"filter": {"enabled": [{"weight": 1}]}}),
        "profiles[0].plugins.filter.enabled[0].name: Required value",
    ),
    (
        "wrong-point",
        one({"score": {"enabled": [{"name": "Sort"}]}}),
        'profiles[0].plugins.score.enabled[0]: plugin "Sort" does not implement score',
    ),
    (
        "wrong-point-per-node-form",
        one({"preFilter": {"enabled": [{"name": "PerNode"}]}}),
        'profiles[0].plugins.preFilter.enabled[0]: plugin "PerNode" does not implement preFilter',
    ),
    (
        "enabled-twice",
        one({"filter": {"enabled": [{"name": "Fit"}, {"name": "Fit"}]}}),
        'profiles[0].plugins.filter.enabled[1].name: plugin "Fit" is enabled twice',
    ),
    (
        "enabled-twice-multi-point",
        one({"multiPoint": {"enabled": [{"name": "Gang"}, {"name": "Gang"}]}}),
        'profiles[0].plugins.multiPoint.enabled[1].name: plugin "Gang" is enabled twice',
    ),
    (
        "weight-type",
        one({"score": {"enabled": [{"name": "Image", "weight": "high"}]}}),
        'profiles[0].plugins.score.enabled[0].weight: Invalid value: "high": must be an integer',
    ),
    (
        "negative-weight",
        one({"multiPoint": {"enabled": [{"name": "Image", "weight": -1}]}}),
        "profiles[0].plugins.multiPoint.enabled[0].weight: Invalid value: -1: must be between 0 "
        "and 2147483647, inclusive",
    ),
    (
        "weights-overflow",  # an int32 weight (kube's type) cannot make the total overflow
        one({"score": {"enabled": [{"name": "Image", "weight": 2**62}]}}),
        "profiles[0].plugins.score.enabled[0].weight: Invalid value: 4611686018427387904: must be "
        "between 0 and 2147483647, inclusive",
    ),
    (
        "no-queue-sort",
        one({"queueSort": {"disabled": [{"name": "*"}]}}),
        "profiles[0].plugins.queueSort: exactly one queueSort plugin must be enabled, got 0",
    ),
    (
        "two-queue-sorts",
        one({"multiPoint": {"enabled": [{"name": "OtherSort"}]}}),
        "profiles[0].plugins.queueSort: exactly one queueSort plugin must be enabled, "
        'got 2: "Sort", "OtherSort"',
    ),
    (
        "no-bind",
        one({"bind": {"disabled": [{"name": "*"}]}}),
        "profiles[0].plugins.bind: at least one bind plugin must be enabled",
    ),
    (
        "queue-sort-differs",
        cfg(
            profiles=[
                {"schedulerName": "a"},
                {
                    "schedulerName": "b",
                    "plugins": {
                        "queueSort": {
                            "disabled": [{"name": "*"}],
                            "enabled": [{"name": "OtherSort"}],
                        }
                    },
                },
            ]
        ),
        'profiles[1].plugins.queueSort: must be the same for all profiles: "OtherSort" here, '
        '"Sort" in profiles[0]',
    ),
    (
        "queue-sort-args-differ",
        cfg(
            profiles=[
                {"schedulerName": "a"},
                {"schedulerName": "b", "pluginConfig": [{"name": "Sort", "args": {"x": 1}}]},
            ]
        ),
        'profiles[1].pluginConfig[0].args: the args of queueSort plugin "Sort" must be the '
        "same for all profiles",
    ),
    (
        "queue-sort-args-missing",
        cfg(
            profiles=[
                {"schedulerName": "a", "pluginConfig": [{"name": "Sort", "args": {"x": 1}}]},
                {"schedulerName": "b"},
            ]
        ),
        'profiles[1].pluginConfig: the args of queueSort plugin "Sort" must be the same for '
        "all profiles",
    ),
    # pluginConfig
    (
        "plugin-config-unknown",
        one(pluginConfig=[{"name": "Nope", "args": {}}]),
        'profiles[0].pluginConfig[0].name: unknown plugin "Nope"',
    ),
    (
        "plugin-config-duplicate",
        one(pluginConfig=[{"name": "Fit"}, {"name": "Fit", "args": {}}]),
        'profiles[0].pluginConfig[1].name: Duplicate value: "Fit"',
    ),
    (
        "plugin-config-args-type",
        one(pluginConfig=[{"name": "Fit", "args": ["a"]}]),
        "profiles[0].pluginConfig[0].args: Invalid value: array: must be an object",
    ),
    (
        "plugin-config-field",
        one(pluginConfig=[{"name": "Fit", "arguments": {}}]),
        'profiles[0].pluginConfig[0].arguments: unknown field (did you mean "args"?)',
    ),
    (
        "plugin-config-args-kind",
        one(pluginConfig=[{"name": "Fit", "args": {"kind": "SpreadArgs"}}]),
        'profiles[0].pluginConfig[0].args.kind: Unsupported value: "SpreadArgs": supported '
        'values: "FitArgs"',
    ),
    (
        "plugin-config-args-api-version",
        one(pluginConfig=[{"name": "Fit", "args": {"apiVersion": "v1"}}]),
        'profiles[0].pluginConfig[0].args.apiVersion: Unsupported value: "v1": supported values: '
        '"kubescheduler.config.k8s.io/v1"',
    ),
    # troupe
    (
        "fifo-streak",
        cfg(troupe={"fifoFallback": {"failureStreak": 0}}),
        "troupe.fifoFallback.failureStreak: Invalid value: 0: must be greater than or equal to 1",
    ),
    (
        "fifo-enabled-type",
        cfg(troupe={"fifoFallback": {"enabled": "yes please"}}),
        'troupe.fifoFallback.enabled: Invalid value: "yes please": must be a boolean',
    ),
    (
        "fifo-queue-length",
        cfg(troupe={"fifoFallback": {"minQueueLength": -1}}),
        "troupe.fifoFallback.minQueueLength: Invalid value: -1: must be greater than or equal to 0",
    ),
    (
        "fifo-duration",
        cfg(troupe={"fifoFallback": {"durationSeconds": 0}}),
        "troupe.fifoFallback.durationSeconds: Invalid value: 0: must be greater than zero",
    ),
    (
        "fifo-unknown",
        cfg(troupe={"fifoFallback": {"streak": 3}}),
        "troupe.fifoFallback.streak: unknown field",
    ),
    (
        "flush",
        cfg(troupe={"unschedulableFlushSeconds": "5m"}),
        'troupe.unschedulableFlushSeconds: Invalid value: "5m": must be a number of seconds',
    ),
    (
        "ttl-negative",
        cfg(troupe={"assumedPodTTLSeconds": -1}),
        "troupe.assumedPodTTLSeconds: Invalid value: -1: must be greater than or equal to 0",
    ),
    (
        "ttl-infinite",
        cfg(troupe={"assumedPodTTLSeconds": float("inf")}),
        "troupe.assumedPodTTLSeconds: Invalid value: Infinity: must be a number of seconds",
    ),
    ("seed", cfg(troupe={"seed": 1.5}), "troupe.seed: Invalid value: 1.5: must be an integer"),
    (
        "group-cycle",
        cfg(troupe={"gangGroupCycle": 1}),
        "troupe.gangGroupCycle: Invalid value: 1: must be a boolean",
    ),
    (
        "coalesce",
        cfg(troupe={"podGroupStatusCoalesceSeconds": -0.5}),
        "troupe.podGroupStatusCoalesceSeconds: Invalid value: -0.5: must be greater than or equal "
        "to 0",
    ),
    (
        "metrics-port",
        cfg(troupe={"metricsPort": 70000}),
        "troupe.metricsPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
    ),
    (
        "score-watermark-zero",
        cfg(troupe={"scoreWatermark": 0}),
        "troupe.scoreWatermark: Invalid value: 0: must be a number in (0, 1]",
    ),
    (
        "score-watermark-above-one",
        cfg(troupe={"scoreWatermark": 1.5}),
        "troupe.scoreWatermark: Invalid value: 1.5: must be a number in (0, 1]",
    ),
    (
        "score-watermark-type",
        cfg(troupe={"scoreWatermark": "80%"}),
        'troupe.scoreWatermark: Invalid value: "80%": must be a number in (0, 1]',
    ),
    ("troupe-type", cfg(troupe=[]), "troupe: Invalid value: array: must be an object"),
    ("troupe-unknown", cfg(troupe={"bogus": "max"}), "troupe.bogus: unknown field"),
]


@pytest.mark.parametrize(
    ("obj", "message"), [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_errors_name_the_field(obj: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        fake(obj)
    assert str(e.value) == message
    assert str(e.value) == ": ".join(p for p in (e.value.field_path, e.value.problem) if p)


def test_in_tree_plugin_at_a_point_it_does_not_implement() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(one({"score": {"enabled": [{"name": "PrioritySort"}]}}), IN_TREE)
    assert str(e.value) == (
        'profiles[0].plugins.score.enabled[0]: plugin "PrioritySort" does not implement score'
    )


def test_a_default_plugin_missing_from_the_registry_is_reported() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config({}, FAKE, (*FAKE_DEFAULTS, PluginSpec("Gone")))
    assert str(e.value) == (
        'profiles[0].plugins.multiPoint: default plugin "Gone" is not in the registry'
    )


def test_bad_plugin_args_stop_startup_naming_the_field() -> None:
    c = parse_config(
        one(
            pluginConfig=[
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Fancy"}}}
            ]
        ),
        IN_TREE,
    )
    p = c.profiles[0]
    with pytest.raises(ProfileError) as e:
        Profile(p.scheduler_name, p.plugins, IN_TREE, make_handle())
    assert str(e.value).startswith("profiles[0].pluginConfig[0].args.scoringStrategy.type: ")


# ---- files -------------------------------------------------------------------------------


def build_profiles(c: SchedulerConfig) -> None:
    for p in c.profiles:
        Profile(p.scheduler_name, p.plugins, IN_TREE, make_handle())


def test_full_file() -> None:
    c = load_config(str(FIXTURES / "full.yaml"), IN_TREE)
    build_profiles(c)
    assert (c.percentage_of_nodes_to_score, c.profiles[0].percentage_of_nodes_to_score) == (40, 70)
    assert (c.pod_initial_backoff_seconds, c.pod_max_backoff_seconds) == (2.0, 20.0)
    got = layout(c)
    assert got["filter"] == [
        "NodeResourcesFit",
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodePorts",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
        "NodeDeclaredFeatures",
    ]
    assert got["score"] == [
        "NodeResourcesFit*4",
        "TaintToleration*5",
        "NodeAffinity*2",
        "VolumeBinding*1",
        "PodTopologySpread*2",
        "InterPodAffinity*2",
        "DynamicResources*2",
    ]
    cos = c.profiles[0].plugins["permit"][0]
    assert (cos.name, cos.args, cos.args_path) == (
        "Coscheduling",
        {"permitWaitingTimeSeconds": 30},
        "profiles[0].pluginConfig[1].args",
    )
    assert c.troupe == TroupeSettings(
        fifo_enabled=False,
        fifo_min_queue_length=10,
        fifo_failure_streak=5,
        fifo_duration_seconds=2.5,
        unschedulable_flush_seconds=60.0,
        assumed_pod_ttl_seconds=900.0,
        seed=7,
        group_cycle=False,
        podgroup_status_coalesce_seconds=0.5,
        metrics_port=9090,
    )


def test_a_kube_scheduler_file_is_read_as_it_is() -> None:
    c = load_config(str(FIXTURES / "kube-scheduler.yaml"), IN_TREE)
    build_profiles(c)
    got = layout(c)
    assert got["queueSort"] == ["PrioritySort"]
    assert "permit" not in got
    fit = next(s for s in c.profiles[0].plugins["score"] if s.name == "NodeResourcesFit")
    assert fit.args == {
        "scoringStrategy": {
            "type": "LeastAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
        }
    }
    assert fit.args_path == "profiles[0].pluginConfig[1].args"


def test_two_profiles_file() -> None:
    c = load_config(str(FIXTURES / "two-profiles.yaml"), IN_TREE)
    build_profiles(c)
    assert [p.scheduler_name for p in c.profiles] == ["troupe-scheduler", "troupe-packer"]
    assert layout(c, 1)["score"] == ["NodeResourcesFit*1"]
    assert layout(c, 0) == layout(default_config(IN_TREE))


FILE_ERRORS: Final = [
    (
        "bad-repeated-key.yaml",
        'not valid YAML at line 9, column 7: repeated key "enabled"',
    ),
    (
        "bad-yaml.yaml",
        "not valid YAML at line 4, column 1: expected ',' or ']', but got '<scalar>' "
        "(while parsing a flow sequence at line 3, column 11)",
    ),
    (
        "bad-queue-sort.yaml",
        'profiles[1].plugins.queueSort: must be the same for all profiles: "PrioritySort" '
        'here, "Coscheduling" in profiles[0]',
    ),
    (
        "bad-kube-plugin.yaml",
        'profiles[0].plugins.filter.enabled[0].name: plugin "EBSLimits" is a '
        "kube-scheduler plugin that Troupe does not have",
    ),
    (
        "bad-v1beta3.yaml",
        'apiVersion: Unsupported value: "kubescheduler.config.k8s.io/v1beta3": supported values: '
        '"kubescheduler.config.k8s.io/v1"',
    ),
]


@pytest.mark.parametrize(("name", "problem"), FILE_ERRORS, ids=[f[0] for f in FILE_ERRORS])
def test_file_errors_name_the_file_and_the_field(name: str, problem: str) -> None:
    path = str(FIXTURES / name)
    with pytest.raises(ConfigError) as e:
        load_config(path, IN_TREE)
    assert str(e.value) == f"{path}: {problem}"
    assert e.value.file == path


def test_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(str(missing), IN_TREE)
    assert str(e.value) == f"{missing}: cannot read: No such file or directory"
    with pytest.raises(ConfigError) as e:
        load_config(str(tmp_path), IN_TREE)
    assert str(e.value) == f"{tmp_path}: cannot read: Is a directory"
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError) as e:
        load_config(str(binary), IN_TREE)
    assert str(e.value) == f"{binary}: cannot read: not UTF-8 text"


def test_file_contents(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    assert load_config(str(empty), IN_TREE) == default_config(IN_TREE)
    two = tmp_path / "two.yaml"
    two.write_text("a: 1\n---\nb: 2\n")
    with pytest.raises(ConfigError, match=r"two\.yaml: not valid YAML at line 2, column 1: "):
        load_config(str(two), IN_TREE)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("hello\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(scalar), IN_TREE)
    assert (
        str(e.value)
        == f'{scalar}: Invalid value: "hello": must be a KubeSchedulerConfiguration object'
    )
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("percentageOfNodesToScore: -1\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(wrong), IN_TREE)
    assert (
        str(e.value)
        == f"{wrong}: percentageOfNodesToScore: Invalid value: -1: must be between 0 and 100, "
        "inclusive"
    )
    assert e.value.field_path == "percentageOfNodesToScore"
    # YAML anchors and merge keys are not repeated keys.
    merged = tmp_path / "merged.yaml"
    merged.write_text(
        "troupe:\n  fifoFallback: &f {enabled: false, failureStreak: 3}\n"
        "profiles:\n- schedulerName: a\n  pluginConfig:\n"
        "  - {name: Coscheduling, args: &a {permitWaitingTimeSeconds: 5}}\n"
        "- schedulerName: b\n  pluginConfig:\n"
        "  - name: Coscheduling\n    args:\n      <<: *a\n      permitWaitingTimeSeconds: 5\n"
    )
    c = load_config(str(merged), IN_TREE)
    assert c.profiles[1].plugins["permit"][0].args == {"permitWaitingTimeSeconds": 5}


def test_cli_reports_config_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from troupe.cli import main

    f = tmp_path / "c.yaml"
    f.write_text("profiles: [{plugins: {score: {enabled: [{name: PrioritySort}]}}}]\n")
    assert main(["simulate", "--config", str(f), "tests/fixtures/sim/ports.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"troupe: configuration: {f}: profiles[0].plugins.score.enabled[0]: "
        'plugin "PrioritySort" does not implement score'
    )


# ---- issue #14: bounds on weights, the isolated-CPU resource, hostile files ------------


def fit_args(i: int = 0, **args: Any) -> dict[str, Any]:
    return {"schedulerName": f"s{i}", "pluginConfig": [{"name": "NodeResourcesFit", "args": args}]}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(
            one({"score": {"enabled": [{"name": "ImageLocality", "weight": 2**31}]}}),
            "profiles[0].plugins.score.enabled[0].weight: Invalid value: 2147483648: must be "
            "between 0 and 2147483647, inclusive",
            id="weight-beyond-int32",
        ),
        pytest.param(
            one({"score": {"enabled": [{"name": "ImageLocality", "weight": 10**30}]}}),
            f"profiles[0].plugins.score.enabled[0].weight: Invalid value: {10**30}: must be "
            "between 0 and 2147483647, inclusive",
            id="weight-absurd",
        ),
        *(
            pytest.param(
                cfg(profiles=[fit_args(isolatedCPUResource=r)]),
                f'profiles[0].pluginConfig[0].args.isolatedCPUResource: Invalid value: "{r}": '
                "must be an extended resource name (domain/name)",
                id=f"isolated-{r}",
            )
            for r in ("memory", "cpu", "ephemeral-storage", "pods", "hugepages-2Mi")
        ),
        pytest.param(
            cfg(profiles=[fit_args(isolatedCPUResource="kubernetes.io/cpu")]),
            "profiles[0].pluginConfig[0].args.isolatedCPUResource: Invalid value: "
            '"kubernetes.io/cpu": must be outside the kubernetes.io domain',
            id="isolated-kubernetes-io",
        ),
        pytest.param(
            cfg(profiles=[fit_args(isolatedCPUResource=7)]),
            "profiles[0].pluginConfig[0].args.isolatedCPUResource: Invalid value: 7: "
            "must be a string",
            id="isolated-number",
        ),
        pytest.param(
            cfg(profiles=[fit_args(0), fit_args(1, isolatedCPUResource="example.com/iso")]),
            "profiles[1].pluginConfig[0].args.isolatedCPUResource: Invalid value: "
            '"example.com/iso": must be the same in every profile: '
            'profiles[0].pluginConfig[0].args.isolatedCPUResource is "troupe.dev/isolated-cpu"',
            id="isolated-differs-between-profiles",
        ),
    ],
)
def test_issue14_config_bounds_name_the_field(obj: object, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(obj, IN_TREE)
    assert str(e.value) == message


def test_issue14_weight_at_int32_max_and_an_extended_isolated_resource_are_accepted() -> None:
    c = parse_config(
        cfg(
            profiles=[
                {
                    "plugins": {
                        "score": {"enabled": [{"name": "ImageLocality", "weight": 2**31 - 1}]}
                    },
                    "pluginConfig": [
                        {
                            "name": "NodeResourcesFit",
                            "args": {"isolatedCPUResource": "example.com/iso"},
                        }
                    ],
                }
            ]
        ),
        IN_TREE,
    )
    weights = {s.name: s.weight for s in c.profiles[0].plugins["score"]}
    assert weights["ImageLocality"] == 2**31 - 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param(b"kind: \xff\xfe\n", "cannot read: not UTF-8 text", id="invalid-utf8"),
        pytest.param(
            b"a: " + b"[" * 5000 + b"]" * 5000 + b"\n",
            "nested more than 200 levels deep",
            id="deep-nesting",
        ),
        pytest.param(
            b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + b"".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n".encode()
                for i in range(8)
            ),
            "aliases expand to more than 100000 nodes",
            id="alias-bomb",
        ),
        pytest.param(
            b"percentageOfNodesToScore: " + b"9" * 5000 + b"\n", "not valid YAML", id="huge-int"
        ),
        pytest.param(
            b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            b"podInitialBackoffSeconds: .nan\n",
            "podInitialBackoffSeconds",
            id="nan-duration",
        ),
        pytest.param(
            b"apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
            b"troupe: {unschedulableFlushSeconds: .inf}\n",
            "troupe.unschedulableFlushSeconds",
            id="inf-duration",
        ),
    ],
)
def test_issue14_hostile_config_file_is_one_clear_error(
    tmp_path: Path, text: bytes, problem: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(path), IN_TREE)
    assert str(e.value).startswith(f"{path}: ")
    assert problem in str(e.value)
    assert "\n" not in str(e.value)


def test_score_watermark_is_off_by_default_and_read_as_a_fraction() -> None:
    assert parse_config({}, IN_TREE).troupe.score_watermark is None
    assert parse_config({"troupe": {"scoreWatermark": 0.8}}, IN_TREE).troupe.score_watermark == 0.8
    assert parse_config({"troupe": {"scoreWatermark": 1}}, IN_TREE).troupe.score_watermark == 1.0


# ---- load_yaml_documents: SafeLoader's result from libyaml's events, bounded ----------


SAFE_LOADER_CASES = [
    pytest.param(
        "a: 1\nb: [1, 2.5, .inf, -.nan, 0x1f, 0o17, 1_000, 1:20, true, yes, no, ~, null, '',\n"
        "  2024-01-01, 2024-01-01T00:00:00Z, !!str 5, !!binary aGVsbG8=, !!float 3, '7']\n",
        id="scalars",
    ),
    pytest.param("---\n---\na: &x {k: v}\nb: *x\nc: &y s\nd: *y\n---\n[1]\n", id="documents"),
    pytest.param("a: &x {k: v}\nb:\n  <<: *x\n  z: 1\n", id="merge-key"),
    pytest.param("", id="empty"),
    pytest.param("---\n", id="empty-document"),
    pytest.param("a:\n", id="null-value"),
    pytest.param("? [1]\n: 2\n", id="unhashable-key"),
    pytest.param("!!set {a, b}\n", id="set"),
    pytest.param("x: !!omap [a: 1]\n", id="omap"),
    pytest.param("a: &x 1\nb: &x 2\n", id="duplicate-anchor"),
    pytest.param("a: *nope\n", id="undefined-alias"),
    pytest.param("k: 1\nk: 2\n", id="repeated-key-last-wins"),
    pytest.param("- &a [*a]\n", id="recursive"),
    pytest.param("{a: b, c: d}", id="flow"),
    pytest.param("1: a\n2.5: b\nnull: c\ntrue: d\n", id="scalar-keys"),
    pytest.param("a: !custom 1\n", id="unknown-tag"),
    pytest.param("a: [1, 2\n", id="syntax-error"),
]


def _outcome(load: Any, text: str) -> object:
    try:
        return load(text)
    except (yaml.parser.ParserError, yaml.scanner.ScannerError) as e:
        return type(e)  # libyaml words syntax errors its own way
    except yaml.YAMLError as e:
        return (type(e), getattr(e, "problem", None))


@pytest.mark.parametrize("text", SAFE_LOADER_CASES)
def test_load_yaml_documents_builds_what_safe_loader_builds(text: str) -> None:
    want = _outcome(lambda t: list(yaml.load_all(t, Loader=yaml.SafeLoader)), text)
    assert repr(_outcome(load_yaml_documents, text)) == repr(want)


def test_load_yaml_documents_uses_libyaml_when_pyyaml_has_it() -> None:
    assert (FAST_PARSER is yaml.CSafeLoader) == bool(yaml.__with_libyaml__)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # libyaml's own composer recurses in C: this many levels would crash the process.
        pytest.param("[" * 100_000 + "]" * 100_000, "nested more than 200 levels", id="deep-seq"),
        pytest.param("{a: " * 50_000 + "1" + "}" * 50_000, "nested more than 200", id="deep-map"),
        pytest.param("- " * 201 + "x\n", "nested more than 200 levels", id="scalar-at-201"),
        pytest.param(
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n"
                for i in range(8)
            ),
            "aliases expand to more than 100000 nodes",
            id="alias-bomb",
        ),
    ],
)
def test_load_yaml_documents_bounds(text: str, problem: str) -> None:
    with pytest.raises(yaml.composer.ComposerError) as e:
        load_yaml_documents(text)
    assert problem in str(e.value.problem)
    assert e.value.problem_mark is not None


def test_load_yaml_documents_at_the_bounds() -> None:
    assert load_yaml_documents("- " * 199 + "x\n")[0] is not None
    assert load_yaml_documents("[" * 200 + "]" * 200) is not None


# ---- issue #23: every numeric field refuses what does not fit, naming the field ----

HEAD: Final = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}


def _at(path: str, value: object) -> dict[str, Any]:
    """A configuration with `value` at the dotted `path` (profiles[0] for a list)."""
    cfg: dict[str, Any] = dict(HEAD)
    cur = cfg
    parts = path.split(".")
    for part in parts[:-1]:
        if part.endswith("[0]"):
            lst = cur.setdefault(part[:-3], [{}])
            cur = lst[0]
        else:
            cur = cur.setdefault(part, {})
    cur[parts[-1]] = value
    return cfg


def _coscheduling(key: str, value: object) -> dict[str, Any]:
    cfg: dict[str, Any] = dict(HEAD)
    cfg["profiles"] = [
        {
            "schedulerName": "troupe-scheduler",
            "pluginConfig": [{"name": "Coscheduling", "args": {key: value}}],
        }
    ]
    return cfg


# Every number the configuration file takes (the probe found OverflowError
# tracebacks in the first nine).
NUMERIC_FIELDS: Final = [
    ("podMaxBackoffSeconds", lambda v: _at("podMaxBackoffSeconds", v)),
    ("qps", lambda v: _at("clientConnection.qps", v)),
    ("unschedulableFlushSeconds", lambda v: _at("troupe.unschedulableFlushSeconds", v)),
    ("assumedPodTTLSeconds", lambda v: _at("troupe.assumedPodTTLSeconds", v)),
    ("scoreWatermark", lambda v: _at("troupe.scoreWatermark", v)),
    ("podGroupStatusCoalesceSeconds", lambda v: _at("troupe.podGroupStatusCoalesceSeconds", v)),
    ("durationSeconds", lambda v: _at("troupe.fifoFallback.durationSeconds", v)),
    ("permitWaitingTimeSeconds", lambda v: _coscheduling("permitWaitingTimeSeconds", v)),
    ("podGroupBackoffSeconds", lambda v: _coscheduling("podGroupBackoffSeconds", v)),
    ("podInitialBackoffSeconds", lambda v: _at("podInitialBackoffSeconds", v)),
    ("percentageOfNodesToScore", lambda v: _at("percentageOfNodesToScore", v)),
    ("burst", lambda v: _at("clientConnection.burst", v)),
    ("parallelism", lambda v: _at("parallelism", v)),
    ("minQueueLength", lambda v: _at("troupe.fifoFallback.minQueueLength", v)),
    ("failureStreak", lambda v: _at("troupe.fifoFallback.failureStreak", v)),
    ("seed", lambda v: _at("troupe.seed", v)),
    ("metricsPort", lambda v: _at("troupe.metricsPort", v)),
    ("statusCoalesceSeconds", lambda v: _coscheduling("statusCoalesceSeconds", v)),
    ("topologyDomainsPerCycle", lambda v: _coscheduling("topologyDomainsPerCycle", v)),
    ("placementPodsCountWeight", lambda v: _coscheduling("placementPodsCountWeight", v)),
    ("placementAllocationWeight", lambda v: _coscheduling("placementAllocationWeight", v)),
]
BAD_NUMBERS: Final = [
    pytest.param(10**400, id="400-digits"),
    pytest.param(-(10**400), id="minus-400-digits"),
    pytest.param(float("inf"), id="inf"),
    pytest.param(float("nan"), id="nan"),
]


@pytest.mark.parametrize("value", BAD_NUMBERS)
@pytest.mark.parametrize(("field", "build"), NUMERIC_FIELDS, ids=[f for f, _ in NUMERIC_FIELDS])
def test_issue23_every_numeric_field_refuses_what_does_not_fit(
    tmp_path: Path, field: str, build: Any, value: object
) -> None:
    """As `troupe run --config` and `troupe simulate --config` read it: the file,
    then each profile's plugins (their arguments are checked when built)."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(build(value)))
    with pytest.raises((ConfigError, ProfileError)) as e:
        build_profiles(load_config(str(path), IN_TREE))
    text = str(e.value)
    assert "\n" not in text and field in text, text
    if isinstance(e.value, ConfigError):
        assert text.startswith(f"{path}: "), text
    else:
        assert text.startswith("profiles[0].pluginConfig[0].args."), text
    assert len(text) < 300, text  # the number is described, not printed whole


def test_the_isolated_cpu_names_are_read_once_from_node_resources_fit() -> None:
    c = parse_config(
        {
            "profiles": [
                fit_args(isolatedCPUResource="example.com/iso", isolatedCPUAnnotation="a/b")
            ]
        },
        IN_TREE,
    )
    assert (c.isolated.resource, c.isolated.annotation) == ("example.com/iso", "a/b")
    d = default_config(IN_TREE)
    assert (d.isolated.resource, d.isolated.annotation) == (
        "troupe.dev/isolated-cpu",
        "troupe.dev/isolated-cpu",
    )
