"""gpulab: gpufill's measurements on a GPU machine, one command each (`python3
scripts/lab.py --help`). The shared pieces are in `gpulab.lib`."""
