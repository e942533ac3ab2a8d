"""`python -m troupe` is the `troupe` command."""

from troupe.cli import console

console()
