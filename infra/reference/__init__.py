"""The deployment reference of a stack (`llm-infra docs STACK`): a Markdown page, a plan picture.

Seed 000 was a hand-kept reference ("keep this in sync if the Deployment is edited"); this one
is generated from what is deployed (the typed config, the builders' argv and monitoring, the
plan), and a test fails when a committed `docs/STACK.md` is stale. `page` writes a page,
`flags` explains each flag from its field docstring, `monitoring` writes the metrics, dashboard
and alerts sections.
"""
