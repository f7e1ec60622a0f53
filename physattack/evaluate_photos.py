"""``python -m physattack.evaluate_photos <folder> ...``: the command lives in ``physattack.cli.photos``."""

import sys

from physattack.cli.photos import main

if __name__ == "__main__":
    sys.exit(main())
