"""Evaluation orchestration: ``ivln-ce eval`` (``evaluator.py``: resumable, parallel, distributed
tour evaluation on the rollout engine, official output files), checkpoint folders
(``checkpoints.py``), map and frame recorders (``recorders.py``), ``ivln-ce score``
(``scoring.py``), ``ivln-ce demo`` (``demo.py``), torchrun set-up (``distributed.py``) and a
generated tour example for tests and benchmarks (``example.py``). torch is imported lazily.
"""
