"""Examples shipped with the package: an MCP server the demo and the offline agent use by default."""
