"""The llm-infra Pulumi policy pack (rules in validators.py, wiring in __main__.py)."""
