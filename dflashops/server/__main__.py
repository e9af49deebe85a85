"""``python -m dflashops.server --spec FILE [--preflight-only]``."""

from __future__ import annotations

import sys

from dflashops.server.entry import main

if __name__ == "__main__":
    sys.exit(main())
