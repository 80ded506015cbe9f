"""What a run does: the agent protocol and the built-in agents."""
