"""``python -m physattack.drive run_dir=<run>``: the command lives in ``physattack.cli.drive``."""

import sys

from physattack.cli.drive import main

if __name__ == "__main__":
    sys.exit(main())
