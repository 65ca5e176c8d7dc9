"""``python -m regdev`` runs the command line."""

from .cli._main import main

raise SystemExit(main())
