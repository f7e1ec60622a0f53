"""``python -m physattack +scene=stop_sign attack=yield``: the command lives in ``physattack.cli.attack``."""

import sys

from physattack.cli.attack import main

if __name__ == "__main__":
    sys.exit(main())
