"""Prometheus monitoring of the servers: queries, alert rules, dashboards, monitors."""
