"""``python -m dpemb`` (and ``torchrun --nproc-per-node P -m dpemb train ...``): the CLI."""

import sys

from dpemb.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
