"""The rank's memory allocator (run.allocator): the C library's, or jemalloc or tcmalloc preloaded.

Why a setting: on a CPU host the allocator decides what a rank keeps resident. glibc's heap
keeps the blocks FSDP frees and gathers again (docs/memory.md), and tcmalloc changes the step
time. A rank re-executes itself once with the library in LD_PRELOAD, before any framework is
imported, so every launcher and container runtime gets it the same way, and it records the
library it mapped, read back from /proc/self/maps, whoever preloaded it. A rank asked for an
allocator it could not load fails with that reason in its step log. Stdlib only.
"""

from __future__ import annotations

import os
import sys

# Each allocator's libraries in the order tried: the dynamic loader's own search finds them
# (Debian: libjemalloc2, libtcmalloc-minimal4), so a site's library directories are honoured.
LIBRARIES = {
    "system": (),
    "jemalloc": ("libjemalloc.so.2",),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4"),
}
NAMES = tuple(LIBRARIES)
# The Debian and Ubuntu packages that hold them (the podman base and every Apptainer recipe install both).
DEBIAN_PACKAGES = ("libjemalloc2", "libtcmalloc-minimal4")
# How a mapped library is recognised (a site may preload one the rank was not asked for).
RECOGNISED = {"jemalloc": "libjemalloc", "tcmalloc": "libtcmalloc", "mimalloc": "libmimalloc"}
# How many of the allocator's libraries this rank's re-executions have tried already.
TRIED = "DLBENCH_ALLOCATOR_TRIED"


class AllocatorNotLoaded(RuntimeError):
    """The allocator asked for is not in the rank's process."""


def mapped(maps_path: str = "/proc/self/maps") -> dict:
    """{"name", "library"}: the allocator this process has mapped ("system" when none of the known
    ones is: the C library's, with its path where the process maps are readable)."""
    try:
        with open(maps_path, encoding="utf-8") as maps:
            fields = [line.split(None, 5) for line in maps]
    except OSError:
        return {"name": "system", "library": None}
    # address, permissions, offset, device, inode, then the file's path where one is mapped
    files = sorted({f[5].strip() for f in fields if len(f) == 6 and f[5].startswith("/")})
    for name, marker in RECOGNISED.items():
        found = [path for path in files if os.path.basename(path).startswith(marker)]
        if found:
            return {"name": name, "library": found[0]}
    libc = [path for path in files if os.path.basename(path).startswith("libc.so")]
    return {"name": "system", "library": libc[0] if libc else None}


def preload(asked: str, environ=os.environ) -> None:
    """Re-execute this process with the next of `asked`'s libraries in LD_PRELOAD, unless it has
    the allocator already or every library was tried (the rank's check then says so)."""
    libraries = LIBRARIES[asked]
    if not libraries or mapped()["name"] == asked:
        return
    tried = int(environ.get(TRIED, "0"))
    if tried >= len(libraries):
        return
    # What else is preloaded stays (a site's); the libraries tried before this one go.
    preloaded = [name for name in environ.get("LD_PRELOAD", "").split() if name not in libraries]
    environ = dict(environ, LD_PRELOAD=" ".join([libraries[tried], *preloaded]), **{TRIED: str(tried + 1)})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, environ)  # the same process (pid) for its launcher


def check(asked: str) -> dict:
    """The allocator mapped, if it is the one asked for; else AllocatorNotLoaded naming the key,
    the libraries tried and what holds them."""
    loaded = mapped()
    if asked == "system" or loaded["name"] == asked:
        return loaded
    raise AllocatorNotLoaded(
        f"run.allocator {asked}: the dynamic loader found none of {', '.join(LIBRARIES[asked])} "
        f"in this environment (running with {loaded['name']}); install it on the host or in the "
        f"image (Debian: {', '.join(DEBIAN_PACKAGES)}) or set run.allocator: system"
    )
