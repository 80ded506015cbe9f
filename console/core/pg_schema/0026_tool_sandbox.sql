-- The PostgreSQL twin of schema/0034_tool_sandbox.sql.
ALTER TABLE tool_health ADD COLUMN sandbox TEXT;
ALTER TABLE tool_health ADD COLUMN refused_hosts TEXT NOT NULL DEFAULT '{}';
