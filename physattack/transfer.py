"""``python -m physattack.transfer run_dir=<run>``: the command lives in ``physattack.cli.transfer``."""

import sys

from physattack.cli.transfer import main

if __name__ == "__main__":
    sys.exit(main())
