"""Whatever proposes tool calls to the gate and carries its observations back: the loop and its
proposers (the scripted demo, a replay file, a person at the shell), the provider formats and
the MCP server."""
