"""Generated scenes as pure data (no torch, no simulator): seeded procedural houses
(``layout.py``), the 13-class map label set and the MP3D -> 13-class rule (``categories.py``),
and their ``.glb`` + ``.semantic.json`` files (``mesh.py``).
"""
