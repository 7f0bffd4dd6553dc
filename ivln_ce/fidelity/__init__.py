"""Instruction fidelity: the instruction-trajectory compatibility model of seed 002 (§4).

``compat_data`` (pairs, the 2:1:1 mix; no torch), ``compat_features`` (frames along a path and
their cached frozen features), ``compat_model`` (the dual encoder and its losses),
``compat_train`` (``ivln-ce train-compat``), ``compat_score`` (``ivln-ce score-instructions``).
"""
