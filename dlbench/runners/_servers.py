"""Helper processes a rank starts inside its allocation (parameter servers, schedulers).
Stdlib only; not a framework module (the leading underscore keeps it out of the registry)."""

# Prefix of a helper's `python -c` code (argv[1]: the starting rank's pid): the helper exits
# when that rank is gone, so no orphaned server outlives a killed or cancelled run.
ORPHAN_GUARD = """
import os, sys, threading, time
parent = int(sys.argv[1])
def _watch():
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(1.0)
threading.Thread(target=_watch, daemon=True).start()
"""
