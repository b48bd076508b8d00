"""`python3 -m gpulab COMMAND ...` from scripts/ (the same as `python3 scripts/lab.py`)."""
import sys

from .cli import main

sys.exit(main(sys.argv[1:]))
