"""`python -m trends` runs the CLI (same as the `trends` console script)."""

from trends.cli import main

main()
