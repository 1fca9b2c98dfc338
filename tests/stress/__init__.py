"""Stress soaks with free threads, for a report; deselected by default (pytest -m stress)."""
