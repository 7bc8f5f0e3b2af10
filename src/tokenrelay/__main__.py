"""``python -m tokenrelay``: the same command line as the ``tokenrelay`` script."""

from tokenrelay.cli import main

raise SystemExit(main())
