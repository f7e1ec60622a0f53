"""``python -m physattack.calibrate chart|fit``: the command lives in ``physattack.cli.calibrate``."""

import sys

from physattack.cli.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
