"""The tools around the scheduler: `troupe simulate` (the real pipeline on a
cluster read from files), its HTML report, the side-by-side comparison of two
configurations, and the volume controllers the simulator plays."""
