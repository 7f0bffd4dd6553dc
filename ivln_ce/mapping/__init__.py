"""Semantic maps (torch, plus numba CPU kernels): depth -> world points (``projection.py``), the
per-stream keep-highest world grid (``world_grid.py``), egocentric 64x64 maps
(``egocentric.py``), known maps (``known.py``, ``point_store.py``), the numba backend
(``kernels.py``) and the observation transform with its three map modes (``mapper.py``).
"""
