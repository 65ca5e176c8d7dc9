"""The tool registry: what a tool is, and the tools regdev offers by default.

:class:`Tool` and :class:`ToolSet` are declared in ``_tool.py``. The default tools,
``write_register`` and ``read_register`` (:data:`REGISTER_TOOLS`), are the default register
map's tools: the map tool builder (``_maptools.py``) derives them from
:meth:`~regdev.RegisterMap.default`, as it derives any map's, so they are declared once.
Their wording, schemas and hints are pinned word for word by
``tests/data/default_map_tools.json``.
"""

from __future__ import annotations

from ._maptools import READ_REGISTER, REGISTER_TOOLS, WRITE_REGISTER
from ._tool import Changes, Handler, Rules, Tool, ToolSet

__all__ = [
    "READ_REGISTER",
    "REGISTER_TOOLS",
    "WRITE_REGISTER",
    "Changes",
    "Handler",
    "Rules",
    "Tool",
    "ToolSet",
]
