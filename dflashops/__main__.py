"""``python -m dflashops``: the same as the ``dflashops`` console script."""

from dflashops.cli import main

main()
