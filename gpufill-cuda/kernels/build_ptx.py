#!/usr/bin/env python3
"""Regenerates gpufill-cuda/kernels/spin.ptx from gpufill-cuda/kernels/spin.cu with NVRTC, on a CPU-only machine.

NVRTC is NVIDIA's runtime compiler library: the same front end (NVVM) as nvcc, shipped
on PyPI without the rest of the toolkit. It needs no GPU and no driver.

    pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12   # NVRTC; ptxas for checking
    python3 gpufill-cuda/kernels/build_ptx.py                               # writes gpufill-cuda/kernels/spin.ptx

The PTX ISA version NVRTC writes (8.8 for CUDA 12.9) is lowered to PTX_VERSION so that
older drivers can JIT the file: the kernels use nothing newer than PTX ISA 6.3
(`nanosleep`). Check the result with ptxas (see gpufill-cuda/kernels/README.md).
"""

import ctypes
import glob
import os
import re
import sys

ARCH = "compute_70"
PTX_VERSION = "7.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def find_nvrtc():
    """libnvrtc: $NVRTC_LIB, else the nvidia-cuda-nvrtc-cu12 wheel, else the loader path."""
    if os.environ.get("NVRTC_LIB"):
        return os.environ["NVRTC_LIB"]
    try:
        import nvidia.cuda_nvrtc  # namespace package: no __file__, use __path__

        for root in nvidia.cuda_nvrtc.__path__:
            hits = sorted(glob.glob(os.path.join(root, "lib", "libnvrtc.so.*")))
            hits = [h for h in hits if ".alt." not in h]
            if hits:
                return hits[0]
    except ImportError:
        pass
    return "libnvrtc.so"


def compile_ptx(lib, source, options):
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def check(result, what):
        if result != 0:
            sys.exit(f"nvrtc {what}: {lib.nvrtcGetErrorString(result).decode()}")

    prog = ctypes.c_void_p()
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source, b"spin.cu", 0, None, None), "create")
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    result = lib.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    if log.value.strip():
        # Expected: "Architectures prior to '<compute/sm>_75' are deprecated" (NVRTC 12.9).
        sys.stderr.write(log.value.decode().strip() + "\n")
    check(result, "compile")
    lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(lib.nvrtcGetPTX(prog, ptx), "get ptx")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def main():
    lib_path = find_nvrtc()
    lib = ctypes.CDLL(lib_path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    with open(os.path.join(HERE, "spin.cu"), "rb") as f:
        source = f.read()
    ptx = compile_ptx(lib, source, [f"--gpu-architecture={ARCH}"])
    ptx, count = re.subn(r"^\.version \d+\.\d+$", f".version {PTX_VERSION}", ptx, flags=re.M)
    if count != 1:
        sys.exit("expected exactly one .version line in NVRTC's output")
    header = (
        "//\n"
        f"// gpufill-cuda/kernels/spin.ptx: generated from gpufill-cuda/kernels/spin.cu by gpufill-cuda/kernels/build_ptx.py\n"
        f"// (NVRTC {major.value}.{minor.value}, --gpu-architecture={ARCH}); .version lowered to\n"
        f"// {PTX_VERSION} so that CUDA 11.0+ drivers can JIT it. Do not edit by hand.\n"
    )
    out = os.path.join(HERE, "spin.ptx")
    with open(out, "w") as f:
        f.write(header + ptx)
    print(f"wrote {out} with {lib_path}")


if __name__ == "__main__":
    main()
