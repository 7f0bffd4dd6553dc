"""Official IR2R-CE files and the pure algorithms over them (no torch, no simulator): episodes and
references (``episodes.py``), vocabulary and tokeniser (``vocab.py``), ``tours.json``
(``tours.py``), target tour paths and agent path logs (``targets.py``, ``entry_parser.py``),
bounded JSON reading and atomic writing (``jsonio.py``), tour generation over an injected
distance (``tour_generation.py``), template instructions (``instructions.py``), and numba's
on-disk kernel cache (``numba_cache.py``).
"""
