"""Typed, read-only views over Kubernetes objects as the API server serves them.

Every view is a frozen dataclass built once from the object's dict by the parse
functions in `troupe.api.parse`. Parsing never raises out of this package: a
malformed object becomes an `InvalidObject` that names the offending field, so the
caller can report it where its owner looks and carry on with the rest.

Resource amounts are integers in *scaled units*: `cpu` and the isolated-CPU
resource in milli-units, every other resource in whole units (bytes, pods, GPUs),
rounded up as Kubernetes rounds quantities (`Quantity.MilliValue` / `Value`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, NewType

PodKey = NewType("PodKey", str)  # "<namespace>/<name>"
NodeName = NewType("NodeName", str)
# "<namespace>/<name>" for a scheduler-plugins PodGroup, and
# "scheduling.k8s.io/<namespace>/<name>" for a native one: a namespace is a DNS
# label (no dots), so the two can never collide, and a message that names a
# group says which API it lives in.
GroupKey = NewType("GroupKey", str)

CPU: Final = "cpu"
MEMORY: Final = "memory"
EPHEMERAL_STORAGE: Final = "ephemeral-storage"
PODS: Final = "pods"

# Resources whose amounts are kept in milli-units. The isolated-CPU resource is
# added at run time by whoever configures it (see `milli_resources`).
DEFAULT_MILLI_RESOURCES: Final = frozenset({CPU})

# Non-zero defaults used by scoring for containers that request nothing,
# as kube-scheduler's schedutil.DefaultMilliCPURequest / DefaultMemoryRequest.
DEFAULT_MILLI_CPU_REQUEST: Final = 100
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024

POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
LEGACY_POD_GROUP_LABEL: Final = "pod-group.scheduling.sigs.k8s.io"
# Kubernetes' own gang API: PodGroups of scheduling.k8s.io, joined through a
# pod's spec.schedulingGroup.podGroupName. Kubernetes 1.36 serves v1alpha2;
# 1.37 serves v1beta1 and v1alpha3 (both off by default) and no longer v1alpha2.
NATIVE_POD_GROUP_API: Final = "scheduling.k8s.io"
NATIVE_POD_GROUP_VERSIONS: Final = ("v1beta1", "v1alpha3", "v1alpha2")  # preferred first
# CompositePodGroup is served in v1alpha3 only (Kubernetes 1.37, alpha); so is
# PodGroup's spec.parentCompositePodGroupName.
COMPOSITE_VERSION: Final = "v1alpha3"


def pod_group_key(namespace: str, name: str, native: bool = False) -> GroupKey:
    """The key of a PodGroup: scheduler-plugins' as "ns/name", native ones prefixed
    with their API group."""
    if native:
        return GroupKey(f"{NATIVE_POD_GROUP_API}/{namespace}/{name}")
    return GroupKey(f"{namespace}/{name}")


def split_group_key(key: str) -> tuple[bool, str, str]:
    """(native, namespace, name) of a group key."""
    native = key.startswith(f"{NATIVE_POD_GROUP_API}/")
    rest = key[len(NATIVE_POD_GROUP_API) + 1 :] if native else key
    ns, _, name = rest.partition("/")
    return native, ns, name


ISOLATED_CPU_ANNOTATION: Final = "troupe.dev/isolated-cpu"
ISOLATED_CPU_RESOURCE: Final = "troupe.dev/isolated-cpu"

# Resources is a mapping from resource name to a scaled integer amount.
Resources = Mapping[str, int]

# What the parsers scale to milli-units unless told otherwise: cpu and the
# default isolated-CPU resource name.
MILLI_RESOURCES: Final = frozenset({CPU, ISOLATED_CPU_RESOURCE})


@dataclass(frozen=True, slots=True)
class InvalidObject:
    """A Kubernetes object that could not be read; `message` names the field."""

    kind: str
    namespace: str
    name: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class ParseError(ValueError):
    """A field of decoded JSON/YAML that does not read: raised by the typed readers
    (`troupe.api.readers`) and the parsers, and turned into its user's error at
    that user's edge: `InvalidObject` for an object, `ConfigError` for the
    configuration."""

    def __init__(self, field_path: str, problem: str) -> None:
        super().__init__(f"{field_path}: {problem}")
        self.field_path = field_path
        self.problem = problem


# --- label selectors -----------------------------------------------------------


class SelectorOp(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"  # node selector requirements only
    LT = "Lt"  # node selector requirements only


@dataclass(frozen=True, slots=True)
class Requirement:
    """One `key op values` requirement; `values` as written (Gt/Lt hold one integer)."""

    key: str
    op: SelectorOp
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """As apimachinery labels.Requirement.Matches: NotIn and DoesNotExist match
        an absent key; Gt/Lt read both sides as int64 (strconv.ParseInt) and do
        not match when either is not one."""
        op = self.op
        if op is SelectorOp.IN:
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op is SelectorOp.NOT_IN:
            v = labels.get(self.key)
            return v is None or v not in self.values
        if op is SelectorOp.EXISTS:
            return self.key in labels
        if op is SelectorOp.DOES_NOT_EXIST:
            return self.key not in labels
        v = labels.get(self.key)
        if v is None or len(self.values) != 1:
            return False
        have = parse_label_int(v)
        want = parse_label_int(self.values[0])
        if have is None or want is None:
            return False
        return have > want if op is SelectorOp.GT else have < want


# Go's integer types, as the API server and kube-scheduler hold numbers: a value
# beyond them cannot come from a cluster, and is refused where it is read.
INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
# The longest Go time.Duration (int64 nanoseconds), about 292 years.
MAX_DURATION_SECONDS: Final = INT64_MAX // 10**9


def describe_int(v: int) -> str:
    """An integer for a message: its digits, or how many there are past 40."""
    digits = str(abs(v))
    return str(v) if len(digits) <= 40 else f"an integer of {len(digits)} digits"


def parse_label_int(text: str) -> int | None:
    """A label value as Go's strconv.ParseInt(text, 10, 64) reads it, else None:
    an optional sign, ASCII digits only, within int64."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > 4000:
        return None
    n = int(text)
    return n if INT64_MIN <= n <= INT64_MAX else None


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: matchLabels and matchExpressions, all ANDed.

    An empty selector matches everything; `None` where a selector is optional
    means "matches nothing" as in kube-scheduler, and is the caller's business.
    """

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """matchExpressions on labels and matchFields (only metadata.name), ANDed.

    A term with no requirements at all matches no node, as in kube-scheduler.
    """

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Terms ORed. An empty list of terms matches no node."""

    terms: tuple[NodeSelectorTerm, ...]


@dataclass(frozen=True, slots=True)
class PreferredSchedulingTerm:
    weight: int
    preference: NodeSelectorTerm


# --- taints and tolerations ----------------------------------------------------


class TaintEffect(enum.StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: TaintEffect


class TolerationOp(enum.StrEnum):
    EQUAL = "Equal"
    EXISTS = "Exists"


@dataclass(frozen=True, slots=True)
class Toleration:
    """An empty key with Exists tolerates everything; an empty effect, all effects."""

    key: str = ""
    op: TolerationOp = TolerationOp.EQUAL
    value: str = ""
    effect: TaintEffect | None = None
    toleration_seconds: int | None = None

    def tolerates(self, taint: Taint) -> bool:
        """As k8s.io/api core/v1 Toleration.ToleratesTaint."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.op is TolerationOp.EXISTS:
            return True
        return self.value == taint.value


# --- pod affinity (read here; the plugins come with the topology issue) ---------


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    label_selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    label_selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"
    match_label_keys: tuple[str, ...] = ()


# --- pods, nodes, groups -----------------------------------------------------

PREEMPT_LOWER_PRIORITY: Final = "PreemptLowerPriority"
PREEMPT_NEVER: Final = "Never"
# The pod condition a scheduler sets on a victim it preempts, and its reason.
DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER: Final = "PreemptionByScheduler"


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port with hostPort set. host_ip "" means 0.0.0.0."""

    host_ip: str
    protocol: str  # TCP | UDP | SCTP
    port: int


@dataclass(frozen=True, slots=True)
class PodResourceClaim:
    """One of spec.resourceClaims: the claim the pod names, or the template the
    resourceclaim controller creates the pod's own claim from."""

    name: str
    claim_name: str = ""  # resourceClaimName
    template_name: str = ""  # resourceClaimTemplateName


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    scheduler_name: str
    node_name: str  # "" while pending
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    deleting: bool  # metadata.deletionTimestamp is set
    creation_timestamp: float  # seconds since the epoch; 0.0 if absent
    priority: int  # effective: spec.priority, else the PriorityClass's, else the default
    priority_class_name: str
    # Effective requests as kube-scheduler computes them (max of init/sidecar
    # and regular containers, plus overhead), scaled units. Zero amounts omitted.
    requests: Resources
    # The same with the non-zero scoring defaults for cpu and memory applied
    # per container (kube-scheduler's NonMissingContainerRequests).
    nonzero_cpu: int
    nonzero_memory: int
    host_ports: tuple[HostPort, ...]
    # Images of every init container, then every container (ImageLocality's
    # list), normalized: ":latest" added when untagged.
    images: tuple[str, ...]
    # Init and regular containers, each counted with an image or without
    # (ImageLocality's threshold is per container).
    num_containers: int
    node_selector: Mapping[str, str]
    required_node_affinity: NodeSelector | None
    preferred_node_affinity: tuple[PreferredSchedulingTerm, ...]
    tolerations: tuple[Toleration, ...]
    pod_affinity: PodAffinity | None
    pod_anti_affinity: PodAffinity | None
    topology_spread_constraints: tuple[TopologySpreadConstraint, ...]
    scheduling_gates: tuple[str, ...]
    owner_references: tuple[tuple[str, str], ...]  # (kind, name)
    # The reason of the pod's DisruptionTarget condition when that is True, else
    # "" (the first such condition counts, as upstream's podTerminatingByPreemption).
    disruption_reason: str
    raw: Mapping[str, object] = field(repr=False, compare=False, hash=False)
    # Effective: spec.preemptionPolicy, else the PriorityClass's (as admission sets it).
    preemption_policy: str = PREEMPT_LOWER_PRIORITY
    # spec.schedulingGroup.podGroupName: the native PodGroup the pod joins, or "".
    scheduling_group: str = ""
    # spec.resourceClaims, and status.resourceClaimStatuses (the name of the claim
    # created from each template, by the pod's claim name; "" when none is needed).
    resource_claims: tuple[PodResourceClaim, ...] = ()
    claim_statuses: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The spec fields a pod's required node features are inferred from (as
    # component-helpers' nodedeclaredfeatures reads them): spec.hostNetwork,
    # spec.hostUsers (None when unset), the actions of the containers' and init
    # containers' restartPolicyRules, and whether a volumeMount of any container
    # (ephemeral ones included) sets bindMountOptions.
    host_network: bool = False
    host_users: bool | None = None
    restart_rule_actions: frozenset[str] = frozenset()
    bind_mount_options: bool = False
    # Derived once (every part of the scheduler asks them, preemption's dry runs
    # many times per pod): ns/name, and the group the pod belongs to, whichever
    # API it comes from (None for a lone pod, and for a pod that names two
    # groups: see `group_conflict`).
    key: PodKey = field(init=False, repr=False, compare=False)
    group_key: GroupKey | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", PodKey(f"{self.namespace}/{self.name}"))
        native, label = self.scheduling_group, self.pod_group
        group = None
        if native and not label:
            group = pod_group_key(self.namespace, native, native=True)
        elif label and not native:
            group = pod_group_key(self.namespace, label)
        object.__setattr__(self, "group_key", group)

    @property
    def pod_group(self) -> str:
        """The scheduler-plugins PodGroup name from the pod's label, or ""."""
        return self.labels.get(POD_GROUP_LABEL) or self.labels.get(LEGACY_POD_GROUP_LABEL) or ""

    @property
    def group_conflict(self) -> str | None:
        """Why the pod cannot be scheduled when it names a group in both APIs."""
        native, label = self.scheduling_group, self.pod_group
        if not (native and label):
            return None
        which = POD_GROUP_LABEL if self.labels.get(POD_GROUP_LABEL) else LEGACY_POD_GROUP_LABEL
        return (
            f'pod names two PodGroups: "{pod_group_key(self.namespace, native, native=True)}" '
            f'by spec.schedulingGroup.podGroupName and "{pod_group_key(self.namespace, label)}" '
            f"by label {which}; a pod may join only one"
        )

    @property
    def is_isolated_cpu(self) -> bool:
        return self.annotations.get(ISOLATED_CPU_ANNOTATION, "").lower() == "true"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class ContainerImage:
    names: tuple[str, ...]
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Node:
    name: NodeName
    uid: str
    labels: Mapping[str, str]
    allocatable: Resources  # scaled units; "pods" included
    taints: tuple[Taint, ...]
    unschedulable: bool
    images: tuple[ContainerImage, ...]
    raw: Mapping[str, object] = field(repr=False, compare=False, hash=False)
    # status.declaredFeatures as the kubelet reports them, in its order
    # (NodeDeclaredFeatures matches a pod's required features against them).
    declared_features: tuple[str, ...] = ()


# How a running group may be disrupted by preemption: one member at a time
# ("Single": v1alpha2 "Pod", v1beta1/v1alpha3 `single: {}`, and every
# scheduler-plugins group) or only whole ("All": v1alpha2 "PodGroup",
# v1beta1/v1alpha3 `all: {}`).
DISRUPTION_SINGLE: Final = "Single"
DISRUPTION_ALL: Final = "All"


@dataclass(frozen=True, slots=True)
class PodGroup:
    """A group of pods, from either API: scheduler-plugins' PodGroup CRD
    (scheduling.x-k8s.io, always a gang of `minMember`) or Kubernetes' native
    PodGroup (scheduling.k8s.io: `gang.minCount` -> a gang of that many, `basic`
    -> `gang` False and `min_member` 1, its pods scheduled one by one). The
    plugins and the group cycle read only `min_member`, `gang` and the rest;
    `api_version` says where the status goes and how it is written."""

    namespace: str
    name: str
    uid: str
    creation_timestamp: float
    min_member: int
    min_resources: Resources
    schedule_timeout_seconds: int | None
    status: Mapping[str, object]
    raw: Mapping[str, object] = field(repr=False, compare=False, hash=False)
    api_version: str = "scheduling.x-k8s.io/v1alpha1"
    gang: bool = True
    generation: int = 0
    # The Workload template a native group was created from, (workload name,
    # template name), or None: v1beta1/v1alpha3 spec.workloadRef (workloadName,
    # templateName), v1alpha2 spec.podGroupTemplateRef.workload (workloadName,
    # podGroupTemplateName).
    template_ref: tuple[str, str] | None = None
    # Native parity (scheduling.k8s.io only; preemption reads them): spec.priority
    # (None when unset), spec.priorityClassName, the disruption mode
    # (DISRUPTION_SINGLE or DISRUPTION_ALL) and v1beta1's spec.preemptionPolicy
    # ("" when unset: the pods' own policies apply).
    priority: int | None = None
    priority_class_name: str = ""
    disruption_mode: str = DISRUPTION_SINGLE
    preemption_policy: str = ""
    # spec.resourceClaims (DRA devices shared by the group's pods) and, for those
    # from a template, the claim made for the group (status.resourceClaimStatuses).
    resource_claims: tuple[PodResourceClaim, ...] = ()
    claim_statuses: Mapping[str, str] = field(default_factory=dict, compare=False)
    # v1alpha3's spec.parentCompositePodGroupName: the CompositePodGroup (same
    # namespace) this group is a child of; "" for a root.
    parent: str = ""

    @property
    def native(self) -> bool:
        return self.api_version.split("/")[0] == NATIVE_POD_GROUP_API

    @property
    def key(self) -> GroupKey:
        return pod_group_key(self.namespace, self.name, self.native)

    def resolved_priority(self, classes: Mapping[str, PriorityClass]) -> int | None:
        """The group's priority as the Priority admission controller resolves it:
        spec.priority, else the named PriorityClass's value; None when the group
        sets neither (or names an unknown class): its pods' priorities apply."""
        if self.priority is not None:
            return self.priority
        pc = classes.get(self.priority_class_name) if self.priority_class_name else None
        return pc.value if pc is not None else None


def composite_key(namespace: str, name: str) -> GroupKey:
    """The key of a CompositePodGroup (its own kind: no PodGroup's key is one)."""
    return GroupKey(f"{NATIVE_POD_GROUP_API}/CompositePodGroup/{namespace}/{name}")


@dataclass(frozen=True, slots=True)
class CompositePodGroup:
    """Kubernetes 1.37's CompositePodGroup (scheduling.k8s.io/v1alpha3, alpha
    behind the CompositePodGroup gate): a group of groups. Its children are the
    PodGroups and CompositePodGroups of its namespace that name it as their
    parent; with the gang policy at least `min_group_count` of them must be
    schedulable together (basic: each on its own, `min_group_count` 1). Its
    topology key, when set, keeps every pod of its subtree in one domain; with
    disruption mode All its subtree is one preemption unit."""

    namespace: str
    name: str
    uid: str
    creation_timestamp: float
    parent: str  # spec.parentCompositePodGroupName; "" for a root
    workload: str  # spec.workloadRef.workloadName
    template: str  # spec.workloadRef.templateName
    gang: bool
    min_group_count: int
    topology_key: str  # spec.schedulingConstraints.topology[0].key; "" for none
    disruption_mode: str
    priority: int | None
    priority_class_name: str
    preemption_policy: str
    status: Mapping[str, object]
    raw: Mapping[str, object] = field(repr=False, compare=False, hash=False)
    generation: int = 0

    @property
    def key(self) -> GroupKey:
        return composite_key(self.namespace, self.name)

    def resolved_priority(self, classes: Mapping[str, PriorityClass]) -> int | None:
        """As PodGroup.resolved_priority."""
        if self.priority is not None:
            return self.priority
        pc = classes.get(self.priority_class_name) if self.priority_class_name else None
        return pc.value if pc is not None else None


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    global_default: bool
    preemption_policy: str = PREEMPT_LOWER_PRIORITY


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    """A policy/v1 PodDisruptionBudget, reduced to what preemption reads (as
    kube-scheduler's filterPodsWithPDBViolation): an absent or empty selector
    selects no pod."""

    namespace: str
    name: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str]  # pod names the API server already counted

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def matches(self, pod: Pod) -> bool:
        return (
            pod.namespace == self.namespace
            and bool(pod.labels)
            and self.selector is not None
            and bool(self.selector.requirements)
            and self.selector.matches(pod.labels)
        )


WORKLOAD_KINDS: Final = ("Service", "ReplicaSet", "StatefulSet", "ReplicationController")


@dataclass(frozen=True, slots=True)
class Workload:
    """A Service, ReplicaSet, StatefulSet or ReplicationController, reduced to
    what spreading defaults need: the selector of the pods it owns or serves.
    A selector that selects nothing (an empty Service selector) is None."""

    kind: str
    namespace: str
    name: str
    selector: LabelSelector | None


@dataclass(frozen=True, slots=True)
class IsolatedCPU:
    """Where isolated pods are charged (docs/design.md, "Isolated CPUs")."""

    annotation: str = ISOLATED_CPU_ANNOTATION
    resource: str = ISOLATED_CPU_RESOURCE

    def applies(self, pod: Pod) -> bool:
        return pod.annotations.get(self.annotation, "").lower() == "true"
