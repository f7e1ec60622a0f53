"""``python -m physattack.export run_dir=<run>``: the command lives in ``physattack.cli.export``."""

import sys

from physattack.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
