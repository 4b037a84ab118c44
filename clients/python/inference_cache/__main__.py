"""Command line of the inference_cache package: ``python3 -m inference_cache fingerprint``."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
