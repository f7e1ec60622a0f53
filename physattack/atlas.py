"""``python -m physattack.atlas +scene=stop_sign``: the command lives in ``physattack.cli.atlas``."""

import sys

from physattack.cli.atlas import main

if __name__ == "__main__":
    sys.exit(main())
