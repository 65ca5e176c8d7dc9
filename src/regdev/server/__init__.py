"""The MCP server (``regdev serve``): stdio and streamable HTTP transports, the bearer-token
and OAuth checks of HTTP callers, the limits on what one caller may take, and how a person
approves a protected write (elicitation through the client, or a page of its own). It serves a
gate to MCP clients; the agents that propose calls on their own (the model loop, providers,
eval, replay, shell, demo) are in ``regdev.agents``, beside it and independent of it."""
