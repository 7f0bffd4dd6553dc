"""ivln_ce: Iterative Vision-and-Language Navigation in continuous environments (IR2R-CE)."""

__version__ = "0.1.0"
