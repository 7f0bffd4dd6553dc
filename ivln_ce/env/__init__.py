"""The iterative paradigm (no torch): ``tour_env.TourEnv``, a Gymnasium environment whose episode
is one tour, owning the phase machine (agent, oracle walks, teleports), the memory signals, the
path log, the DAgger expert and the episode measures.
"""
