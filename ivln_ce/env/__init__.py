"""The iterative paradigm: tours, phases, oracle walks, memory signals, path logs, measures."""
