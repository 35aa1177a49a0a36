"""The MCP tools' own read (`collector/mcp/tools.py`); the rest of their reads are the dashboard's."""

# The tables and views users read, with their columns, in order (information_schema passes the
# read-only guard, and is the same on a file, a lake and through a server).
COLUMNS_SQL = (
    "SELECT table_name, column_name, data_type FROM information_schema.columns "
    "WHERE table_catalog = current_database() AND table_schema = 'main' "
    "ORDER BY table_name, ordinal_position"
)
