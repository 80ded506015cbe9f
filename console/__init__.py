"""agent-console: a terminal console for one person's always-on agent."""

__version__ = "0.1.0"
