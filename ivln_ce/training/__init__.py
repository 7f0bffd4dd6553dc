"""Training (torch): ``ivln-ce train``, teacher forcing and DAgger for the CMA family and MAP-CMA
(``trainer.py``; collection on the rollout engine ``collect.py``, the trajectory store
``store.py``, episodic batches ``batching.py``, tour-sequential lanes ``tour_sequential.py``,
exact data parallelism ``distributed.py``, step scalars ``step_log.py``, ``TrainError`` in
``errors.py``), and ``ivln-ce train-rednet`` (``rednet.py``).
"""
