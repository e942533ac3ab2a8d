"""The annotations the scheduler writes to explain a decision (light to import:
the queue reads the prefix to tell them from a change made by someone else).

A pod annotated `troupe.dev/explain: "true"` gets, when `troupe.explain` is
enabled, its last scheduling attempt written back in the form
kube-scheduler-simulator's debuggable scheduler uses, so that the tools made
for it read them: `kube-scheduler-simulator.sigs.k8s.io/filter-result`
(node -> plugin -> "passed" or the reason), `score-result` (node -> plugin ->
raw score), `finalscore-result` (node -> plugin -> normalised x weight) and
`selected-node`; values are JSON text.
"""

from __future__ import annotations

from typing import Final

EXPLAIN_ANNOTATION: Final = "troupe.dev/explain"
EXPLAIN_PREFIX: Final = "kube-scheduler-simulator.sigs.k8s.io/"
