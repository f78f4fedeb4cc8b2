"""`python -m wattlab.cli`: the same as the `wattlab` command."""

from wattlab.cli import main

main()
