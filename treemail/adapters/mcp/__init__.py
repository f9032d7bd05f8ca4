"""The MCP server over the daemon's client: `treemail mcp` (see server.py)."""
