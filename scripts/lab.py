#!/usr/bin/env python3
"""gpufill's GPU lab: `python3 scripts/lab.py --help` lists the commands."""
import os
import sys

sys.dont_write_bytecode = True  # no scripts/gpulab/__pycache__ in the carried tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpulab.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
