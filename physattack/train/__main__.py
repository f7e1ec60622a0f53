import sys

from physattack.cli.train import main

sys.exit(main())
