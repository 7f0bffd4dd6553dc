"""``ivln-ce reproduce``: the paper's Tables 3 and 4 on the embedded benchmark by one resumable
command: what runs (``plan.py``), the steps (``pipeline.py``: benchmark, RedNet, known maps,
training, evaluation), the tables with verdicts (``tables.py``) and tour coverage, Fig. 2b
(``coverage.py``). The top of the package graph below ``cli.py``.
"""
