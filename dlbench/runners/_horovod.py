"""Horovod over Gloo without `horovodrun`: the environment and rendezvous each rank needs,
derived from `spec.dist` alone (the launcher's one process per device). Stdlib only; not a
framework module (the leading underscore keeps it out of the registry).

`horovodrun --gloo` does two things the dlbench launcher (local spawn or srun) does
itself here: it sets HOROVOD_RANK/SIZE/LOCAL_*/CROSS_*/HOSTNAME per process and the Gloo
rendezvous address, and it runs an HTTP rendezvous server (horovod.runner.http) that hands
out the ranks' Gloo addresses. Rank 0 starts that server on `master_addr`:
`rendezvous_port(dist)` (a fixed offset from the run's master port, so every rank knows
it without talking to the others); every rank sets the variables before `hvd.init()`.

Status: Horovod 0.28.1 (its last release) does not build in the dlbench environments (see
README "Strategies"), so this path has not run here; it follows horovodrun 0.28.1's
gloo_run.py (create_slot_env_vars, create_run_env_vars, RendezvousServer).
"""

from __future__ import annotations

import os
import threading

# Why the horovod strategy's cells are unavailable with the locked environments.
UNAVAILABLE = (
    "Horovod is not in the framework environment's lock: horovod 0.28.1 (its last release, "
    "2023) did not build here with pip (CMake: no CUDA runtime for the CUDA build of torch; "
    "C++14 against headers that need C++17; the TensorFlow build did not finish in 15 min); "
    "the code path is kept for clusters with a working Horovod"
)


def strategy():
    """The horovod strategy record every framework declares (dlbench.runners.plugin)."""
    from dlbench.runners.plugin import Strategy

    return Strategy(
        "horovod",
        "Horovod: synchronous data parallelism, gradients ring-all-reduced every step (Gloo on CPU, NCCL on GPU)",
        unavailable=UNAVAILABLE,
    )


# Offset of the Gloo rendezvous port from the run's master port: above the per-rank ports
# MultiWorkerMirrored uses (master_port + rank) within Slurm's port block (dlbench.launch.slurm).
RENDEZVOUS_OFFSET = 97


def rendezvous_port(dist) -> int:
    return dist.master_port + RENDEZVOUS_OFFSET


def node_names(dist) -> list[str]:
    """One name per node, in node order (HOROVOD_HOSTNAME must match the allocation plan)."""
    nodes = max(1, dist.world_size // max(1, dist.local_world_size))
    return [f"node{n}" for n in range(nodes)]


def slot_environment(dist) -> dict:
    """HOROVOD_* of this rank (block placement: rank r on node r // local_world_size)."""
    per_node = max(1, dist.local_world_size)
    names = node_names(dist)
    node = dist.rank // per_node
    return {
        "HOROVOD_HOSTNAME": names[node],
        "HOROVOD_RANK": str(dist.rank),
        "HOROVOD_SIZE": str(dist.world_size),
        "HOROVOD_LOCAL_RANK": str(dist.local_rank),
        "HOROVOD_LOCAL_SIZE": str(per_node),
        "HOROVOD_CROSS_RANK": str(node),
        "HOROVOD_CROSS_SIZE": str(len(names)),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": dist.master_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous_port(dist)),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


def prepare(dist) -> object | None:
    """Set this rank's HOROVOD_* variables; on rank 0 start the rendezvous server (returned,
    to be stopped in close()). Call before `hvd.init()`; needs horovod importable."""
    os.environ.update(slot_environment(dist))
    if dist.rank != 0:
        return None
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer, RendezvousServer

    per_node = max(1, dist.local_world_size)
    hosts = parse_hosts(",".join(f"{name}:{per_node}" for name in node_names(dist)))
    server = RendezvousServer()
    # RendezvousServer.start() picks a random port the other ranks could not know: bind the
    # agreed one instead (what start() does, with our address).
    server._httpd = RendezvousHTTPServer(("0.0.0.0", rendezvous_port(dist)), RendezvousHandler, 0)
    server._listen_thread = threading.Thread(target=server._httpd.serve_forever, daemon=True)
    server._listen_thread.start()
    server.init(get_host_assignments(hosts, dist.world_size))
    return server


def start(module: str, dist):
    """Import Horovod's framework module (e.g. "horovod.torch"), set up the rendezvous and
    `hvd.init()`. Returns (hvd, the rendezvous server or None); a missing Horovod raises with
    the reason its cells are unavailable here."""
    import importlib

    try:
        hvd = importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(f"horovod: {UNAVAILABLE} ({exc})") from exc
    rendezvous = prepare(dist)
    hvd.init()
    if hvd.size() != dist.world_size:
        raise RuntimeError(f"horovod: size {hvd.size()}, expected {dist.world_size}")
    return hvd, rendezvous
