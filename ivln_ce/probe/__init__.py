"""Behavioural probes (seed 003, Yang et al., *Behavioral Analysis of VLN Agents*): skill-specific
intervention episodes for continuous-environment agents.

An aligned episode (``data/alignment.py``) is cut at a point p_j of its reference path; the
instruction keeps the words that bring the agent there, and a templated skill sentence is
appended. Stage 1 builds stop and direction probes (``ivln-ce probe build``):

- ``skills.py``: skills, conditions, templates, the six direction sectors;
- ``truncate.py``: where an aligned episode can be cut and which tokens are kept;
- ``free_space.py``: free space around a point through the ``Simulator`` protocol;
- ``compose.py``: the probe's episodes, one per condition;
- ``store.py``: the output folder (one folder per probe id, resumable, atomic);
- ``statistics.py``: what was kept and why the rest was rejected, per source and per split;
- ``build.py``: the whole build over a split, with statistics per skill.

Imports: ``config.py``, ``geometry.py``, ``fingerprint.py``, ``run_folder.py``, ``data/``,
``sim/``, ``env/`` (the scene-path containment rule). Object and room probes, running agents on
probes, scores and figures are later stages.
"""
