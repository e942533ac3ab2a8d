"""Typed, read-only views over Kubernetes objects, and the rules kube-scheduler
applies to them one object at a time.

* `types` — the views (Pod, Node, PodGroup, ...) and the contract other layers
  code against. Imports nothing else from this package.
* `quantity` — exact resource.Quantity parsing and scaled units.
* `selectors` — label / node selectors: reading and scalar matching.
* `taints` — taints and tolerations: reading and the TaintToleration helpers.
* `parse` — whole objects to views; malformed input becomes `InvalidObject`.

Nothing here imports kopf, the kubernetes client, numpy or any other layer.
Import from the modules themselves; this package re-exports nothing, so that
importing `troupe.api.types` stays cheap.
"""
