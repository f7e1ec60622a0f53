"""``python -m physattack.evaluate run_dir=<run>``: the command lives in ``physattack.cli.evaluate``."""

import sys

from physattack.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
