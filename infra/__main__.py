"""Pulumi entry point (`main: infra/`)."""

from infra.program import main

main()
