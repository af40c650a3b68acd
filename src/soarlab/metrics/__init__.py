"""Metrics: the SOAR score (RULES.md 1)."""
