"""Targets: one module per target (its `Target` class: the core and the optional parts it has),
the wiring of the components from a validated stack, and one table of the targets, which every
caller asks (`infra.targets.registry`)."""
