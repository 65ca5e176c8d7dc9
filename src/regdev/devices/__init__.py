"""What a tool call reaches: the :class:`Device` interface and the in-process register file,
the wire protocol codec (sans-IO) and the serial backend. It imports neither the gate nor the
agents: a device knows nothing of tool calls."""
