"""The operator: kopf feeds the cluster into the scheduler (`main`), leader
election on a Lease (`leader`), and the secure metrics and health port
(`serving`). The only package that imports kopf."""
