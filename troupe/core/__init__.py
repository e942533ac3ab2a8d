"""The scheduler's core: the queue, the cache and its snapshot, the pod, group
and binding cycles, the event handlers, and what they share (clock, metrics,
the cluster-client protocol, the Event recorder). It never imports kopf, the
kubernetes client or a plugin: plugins reach it through the framework's
extension points (`troupe.framework`)."""
