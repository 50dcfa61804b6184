"""``python -m aioenv.cli``: the ``aioenv`` command."""

import sys

from aioenv.cli.main import main

sys.exit(main())
