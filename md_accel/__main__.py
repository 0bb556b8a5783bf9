"""``python -m md_accel`` runs the ``md-accel`` command line."""
from md_accel.cli import main

raise SystemExit(main())
