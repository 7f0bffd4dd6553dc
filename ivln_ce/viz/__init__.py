"""Pictures: scenes from above and from the agent, maps, tours."""
