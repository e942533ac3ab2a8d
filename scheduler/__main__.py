"""`python -m scheduler` is the `troupe` command."""

from scheduler.cli import main

raise SystemExit(main())
