"""The ``regdev`` command line: one module per command, the shared options and the output
handling. It may import every other part."""
