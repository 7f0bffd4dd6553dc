"""Behavioural probes (seed 003, Yang et al., *Behavioral Analysis of VLN Agents*): skill-specific
intervention episodes for continuous-environment agents, and what agents do on them.

An aligned episode (``data/alignment.py``) is cut at a point p_j of its reference path; the
instruction keeps the words that bring the agent there, and a templated skill sentence is
appended. Stage 1 builds stop, direction, object and room probes (``ivln-ce probe build``):

- ``skills.py``: skills, conditions, templates, the six direction sectors, room variants;
- ``truncate.py``: where an aligned episode can be cut and which tokens are kept;
- ``free_space.py``: free space around a point through the ``Simulator`` protocol;
- ``semantics.py``: a scene's object categories and room regions (embedded houses);
- ``objects.py``: objects visible in the semantic frames at p_j;
- ``rooms.py``: the nearest region of each other room type, d_geo, hops, the first action;
- ``targets.py``: the object and room targets of a cut point (with their filters);
- ``compose.py``: the probe's episodes, one per condition;
- ``store.py``: the output folder (one folder per probe id, resumable, atomic); ``folders.py``:
  what it shares with ``run_store.py`` (bounded JSON reads, claiming a folder, the manifest);
- ``statistics.py``: what was kept and why the rest was rejected, per source and per split;
- ``build.py``: the whole build over a split, with statistics per skill.

Stage 2 runs an agent on them (``ivln-ce probe run``) and compares agents (``probe tables``):

- ``probe_set.py``: a finished build folder, read and checked;
- ``teacher.py``: the teacher's low-level actions along tau (the follower, point by point);
- ``driver.py``: teacher forcing on the rollout engine, the reading at p_j;
- ``grounding.py``: the actions that ground each skill, the one-step measure;
- ``reference_agents.py``: probe_oracle, forward_biased, uniform (known answers);
- ``policy_scorer.py``: a learned policy as the scorer (torch; imported only for one);
- ``run_store.py``, ``run.py``: the resumable output folder and the run;
- ``analysis.py``, ``tables.py``, ``results.py``: Scores, effects with hierarchical-bootstrap
  intervals, mixed models (statsmodels); Markdown / CSV / LaTeX tables.

Stage 3 draws them (``ivln-ce probe figures``, ``viz report --probes``):

- ``figure_data.py``: the numbers of the seed's figures (stop vs length, direction, object
  error, room grounding mass) and how an action distribution is read as a heading;
- ``figures.py``: the drawings (matplotlib), PNG / SVG / CSV; ``report_part.py``: the figures
  and example probes as plain data for the report (``viz/`` does not import ``probe/``).

Imports: ``config.py``, ``geometry.py``, ``fingerprint.py``, ``run_folder.py``, ``data/``,
``metrics/`` (the hierarchical bootstrap), ``sim/``, ``env/`` (the scene-path containment rule,
``TourItem``), ``rollout/`` (the engine; ``policy_agent.py`` and ``observations.py`` only in
``policy_scorer.py``). Rollout measures (the room probes' delta d) and habitat-sim's semantic
scene are later stages.
"""
