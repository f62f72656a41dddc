"""NVIDIA's CUDA libraries installed as wheels (nvidia-*-cu11, ...) live in
site-packages/nvidia/<name>/lib, outside the dynamic loader's path. A framework built against
them but not packaged with them (MXNet's CUDA build, envs/mxnet-cuda.in) finds them once they
are loaded, dependencies first, with RTLD_GLOBAL before its own library: the loader then
satisfies its DT_NEEDED entries by soname. Stdlib only."""

from __future__ import annotations

import ctypes
import glob
import os
import sys


def preload(sonames: tuple[str, ...], search_path: list[str] | None = None) -> list[str]:
    """Load each soname from the first site directory's nvidia/*/lib that has it; the paths
    loaded. One that no wheel provides is left to the system's loader (a system CUDA)."""
    roots = [os.path.join(p, "nvidia") for p in (search_path or sys.path) if os.path.isdir(os.path.join(p, "nvidia"))]
    loaded = []
    for soname in sonames:
        found = sorted(f for root in roots for f in glob.glob(os.path.join(root, "*", "lib", soname)))
        if found:
            ctypes.CDLL(found[0], mode=ctypes.RTLD_GLOBAL)
            loaded.append(found[0])
    return loaded
