"""`python -m scheduler` is the `troupe` command."""

from scheduler.cli import console

console()
