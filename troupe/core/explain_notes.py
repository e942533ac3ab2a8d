"""The annotations the scheduler writes to explain a decision (light to import:
the queue reads `is_explain_note` to tell them from a change made by someone
else).

A pod annotated `troupe.dev/explain: "true"` gets, when `troupe.explain` is
enabled, its last scheduling attempt written back in the form
kube-scheduler-simulator's debuggable scheduler uses, so that the tools made
for it read them: `kube-scheduler-simulator.sigs.k8s.io/filter-result`
(node -> plugin -> "passed" or the reason), `score-result` (node -> plugin ->
raw score), `finalscore-result` (node -> plugin -> normalised x weight),
`selected-node` and `prefilter-result-status`; values are JSON text.

kube-apiserver refuses an object whose annotations (keys and values) total
more than 256 KiB, so the node maps are bounded: the best-scoring feasible
nodes and a sample of the rejected ones per reason, at most
`EXPLAIN_NOTES_MAX_BYTES` with whatever else the pod carries. What was left
out is counted in `troupe.dev/explain-omitted`.
"""

from __future__ import annotations

from typing import Final

EXPLAIN_ANNOTATION: Final = "troupe.dev/explain"
EXPLAIN_PREFIX: Final = "kube-scheduler-simulator.sigs.k8s.io/"
# What the node maps left out (JSON): nodes, feasible and rejected counts.
EXPLAIN_OMITTED: Final = "troupe.dev/explain-omitted"
# kube-apiserver's limit on an object's annotations, keys and values in bytes
# (apimachinery's TotalAnnotationSizeLimitB).
ANNOTATIONS_LIMIT: Final = 256 * 1024
# The most the explanation itself takes, however much room the pod leaves: every
# watch event of the pod carries it.
EXPLAIN_NOTES_MAX_BYTES: Final = 64 * 1024


def is_explain_note(key: str) -> bool:
    """Whether an annotation is one the scheduler writes to explain a decision."""
    return key.startswith(EXPLAIN_PREFIX) or key == EXPLAIN_OMITTED
