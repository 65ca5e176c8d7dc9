"""Whatever proposes tool calls to the gate and carries its observations back: the loop and its
proposers (the scripted demo, a replay file, a person at the shell), real model endpoints and
their evaluation. The MCP server, which answers calls that clients propose, is
``regdev.server``, beside this package and independent of it; the provider formats both speak
are the gate's (``regdev.gate._providers``)."""
