"""The live differential harness (issue 33): each scenario of a corpus runs through
`troupe simulate` and through two `troupe run` replicas on the embedded API server
under injected timing faults, and what must hold whatever the timing is checked
on the API's final state.

- `scenarios`: the corpus (Kubernetes objects; pods created one after another);
- `profiles`: the timing faults of a run (apiserver.faults.Faults) and the leader kill;
- `live`: one run through `troupe run`, with the controllers a cluster would have
  (the device driver that readies binding conditions, the resourceclaim and PV
  controllers' parts) played by the harness;
- `simulated`: the same input through the `troupe simulate` command;
- `invariants`: one function per property, over the final state;
- `soak`: many seeds, profiles and scenarios, bounded in time (`make soak`).
"""
