"""Building benchmark data with a simulator: the synthetic IR2R-CE benchmark (``synthetic.py``,
``ivln-ce data synth``: houses -> episodes -> instructions -> tours -> target tour paths, in the
official file layouts, cached per house) and tours / Table-1 statistics for any episode file
(``tours.py``, ``ivln-ce data tours`` / ``data stats``). No torch.
"""
