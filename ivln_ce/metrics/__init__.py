"""Metrics over paths (numpy / numba only, no torch, no simulator): the one exact DTW kernel
(``dtw.py``), episodic VLN metrics (``episode.py``), t-nDTW official and paper (``tour.py``),
t-nDTW warping paths for the report (``alignment.py``), a slow dtw-python cross-check
(``windowed_reference.py``) and the hierarchical bootstrap of a mean (``bootstrap.py``, shared by
``reproduce/`` and ``probe/``). Distances are injected.
"""
