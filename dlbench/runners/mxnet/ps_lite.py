"""The ps-lite parameter server of MXNet's `dist_sync` kvstore, started and stopped without
dmlc-tracker (docs/frameworks/mxnet.md, "dist_sync"): every rank derives the layout from
`spec.dist` alone. Stdlib only; `mx` is passed in once MXNet is imported."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time

from dlbench.runners import _servers

RENDEZVOUS_TIMEOUT_S = 180  # scheduler port reachable / ps-lite rendezvous complete, each
FINALIZE_TIMEOUT_S = 60  # ps-lite's exit barrier in close()
PS_GRACE_S = 30  # scheduler/server exit after the workers finalised

# The scheduler / server process: guard against an orphaned parameter server, then
# `import mxnet`, which (with DMLC_ROLE=scheduler|server) runs the ps-lite loop and exits.
PS_PROCESS_CODE = (
    _servers.ORPHAN_GUARD
    + """
import mxnet
"""
)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(addr)).is_loopback
    except (OSError, ValueError):
        return False


def common_environment(dist, operator_node_host: str | None) -> dict:
    """DMLC_* every ps-lite process of the run shares, and the address this one announces."""
    nodes = max(1, dist.world_size // max(1, dist.local_world_size))
    env = {
        "DMLC_PS_ROOT_URI": dist.master_addr,
        "DMLC_PS_ROOT_PORT": str(dist.master_port),
        "DMLC_NUM_WORKER": str(dist.world_size),
        "DMLC_NUM_SERVER": str(nodes),
    }
    workers = dist.endpoints.get("workers") or []
    if operator_node_host:
        env["DMLC_NODE_HOST"] = operator_node_host
    elif _is_loopback(dist.master_addr):
        env["DMLC_NODE_HOST"] = "127.0.0.1"
    elif len(workers) == dist.world_size:
        env["DMLC_NODE_HOST"] = workers[dist.rank].rsplit(":", 1)[0]  # this node's address (Slurm)
    return env


def start_servers(dist, operator_node_host: str | None) -> list[subprocess.Popen]:
    """Rank 0 starts the scheduler, each node's local rank 0 its server, as subprocesses."""
    roles = (["scheduler"] if dist.rank == 0 else []) + (["server"] if dist.local_rank == 0 else [])
    procs = []
    for role in roles:
        # $PORT would be taken by ps-lite as the process's own port (the scheduler's: a hang).
        env = {k: v for k, v in os.environ.items() if k != "PORT" and not k.startswith("DMLC_")}
        env.update(common_environment(dist, operator_node_host))
        env.update(DMLC_ROLE=role, OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1")
        if "DMLC_INTERFACE" in os.environ:
            env["DMLC_INTERFACE"] = os.environ["DMLC_INTERFACE"]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", PS_PROCESS_CODE, str(os.getpid())], env=env, stdin=subprocess.DEVNULL
            )
        )
    return procs


def wait_for_scheduler(dist, procs) -> None:
    """The scheduler must be listening before ps-lite is asked to connect."""
    deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_S
    while True:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"mxnet dist_sync: ps-lite process exited early with code {proc.returncode}")
        try:
            with socket.create_connection((dist.master_addr, dist.master_port), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mxnet dist_sync: no ps-lite scheduler at {dist.master_addr}:{dist.master_port} "
                    f"after {RENDEZVOUS_TIMEOUT_S} s"
                ) from None
            time.sleep(0.2)


def start_rendezvous(mx) -> tuple[dict, threading.Thread]:
    """Create kvstore dist_sync in a thread: ps-lite blocks in C until every worker and server
    has registered, so a missing peer becomes an error (await_rendezvous), not a hang."""
    box: dict = {}

    def create():
        try:
            box["kv"] = mx.kv.create("dist_sync")
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            box["error"] = exc

    thread = threading.Thread(target=create, daemon=True)
    thread.start()
    return box, thread


def await_rendezvous(box: dict, thread: threading.Thread, dist):
    """The kvstore of start_rendezvous, once every worker has joined (at most RENDEZVOUS_TIMEOUT_S)."""
    thread.join(RENDEZVOUS_TIMEOUT_S)
    if thread.is_alive():
        raise RuntimeError(
            f"mxnet dist_sync: ps-lite rendezvous of {dist.world_size} workers did not complete in "
            f"{RENDEZVOUS_TIMEOUT_S} s"
        )
    if "error" in box:
        raise box["error"]
    return box["kv"]


def stop_servers(procs, grace: float) -> None:
    deadline = time.monotonic() + grace
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        if proc.poll() is None:
            proc.kill()
            proc.wait()
