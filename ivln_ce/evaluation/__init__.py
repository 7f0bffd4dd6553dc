"""Orchestration of evaluation: scoring files, reports, the demo."""
