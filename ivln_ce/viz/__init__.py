"""Pictures and reports of results (no torch): scenes (``scenes.py``), maps (``maps.py``), tours
(``tours.py``), episode videos (``video.py``), training curves (``curves.py``), results tables
across runs (``table.py``), results-folder readers (``runs.py``) and the static HTML tour viewer
(``report/``).
"""
