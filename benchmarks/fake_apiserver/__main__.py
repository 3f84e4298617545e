"""``python -m benchmarks.fake_apiserver``: run the fake API server in the foreground."""

import sys

from benchmarks.fake_apiserver.cli import main

sys.exit(main())
