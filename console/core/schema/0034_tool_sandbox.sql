-- Each MCP server's sandbox (issue 33) beside its health: "on" (bubblewrap), "off" (sandbox = false, shown as a
-- warning), "remote" (an HTTP server); and the hosts its egress proxy refused, a JSON object host:port -> count.
ALTER TABLE tool_health ADD COLUMN sandbox TEXT;
ALTER TABLE tool_health ADD COLUMN refused_hosts TEXT NOT NULL DEFAULT '{}';
