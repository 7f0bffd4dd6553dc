"""Torch modules: encoders and ResNet trunks, the CMA family (CMA, TourCMA, PoolCMA, PoolEndCMA),
MAP-CMA, RedNet, the training losses, safe checkpoint reading with the official key layouts
(``official_weights.py``), and ``factory.py``: the one place that builds a policy from
``policy.*`` and writes checkpoints.
"""
