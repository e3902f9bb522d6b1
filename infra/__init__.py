"""The llm-infra Pulumi program: typed stack config wired to the components."""
