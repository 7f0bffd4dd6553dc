"""``ivln-ce reproduce``: the paper's findings on the embedded benchmark (plan, pipeline, tables, coverage)."""
