"""Official IR2R-CE files and pure algorithms over them (no torch, no simulator): episodes
(``episodes.py``), vocabulary (``vocab.py``), ``tours.json`` (``tours.py``), target tour paths
and agent path logs (``targets.py``, ``entry_parser.py``), bounded JSON I/O (``jsonio.py``),
tour generation over an injected distance (``tour_generation.py``), template instructions
(``instructions.py``) and numba's on-disk kernel cache (``numba_cache.py``).
"""
