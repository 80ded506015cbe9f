"""The command line (placeholder until the runtime lands)."""

import click


@click.group(invoke_without_command=True)
def main() -> None:
    """agent-console: a terminal console for one person's always-on agent."""
