"""The rollout engine shared by evaluation and DAgger collection: K tour environments in worker
processes (``engine.py``, ``worker.py``, per-tour ``records.py``, ``scripted.py`` agents;
no torch) and, in the main process, one batched decision per tick (``observations.py``:
``ObservationPipeline``; ``policy_agent.py``: ``PolicyAgent``). ``streams.py`` holds the shared
``StreamView``; ``worker_policy.py`` runs a policy inside a worker (imported only then).
"""
