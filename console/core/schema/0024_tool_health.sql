-- Each MCP server's health as the engine holding the lease last saw it (status --json "tools", the console):
-- written only when a server's state or reason changes, fenced by the writer's holder and generation.
CREATE TABLE tool_health (
    server TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    reason TEXT,
    since INTEGER NOT NULL
);
