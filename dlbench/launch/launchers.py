"""Launchers: how a run's tasks are started, and how a started task finds its place.

One small registered class per `--launcher` value. `command()` is what the launcher runs,
`launch()` starts the run's tasks and returns their exit codes, `rank_environment()` is the
environment a task starts with and `placement()` reads it back inside the task. Stdlib only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from dlbench.launch import slurm
from dlbench.launch.container import runtime_for
from dlbench.launch.record import rank_death
from dlbench.launch.request import LAUNCHER_NAMES, LaunchRequest, registrar
from dlbench.runners import run_layout
from dlbench.runners.base import Distributed

LAUNCHERS: dict[str, type[Launcher]] = {}
register = registrar(LAUNCHERS, LAUNCHER_NAMES, "launcher")


def launcher_for(request: LaunchRequest) -> Launcher:
    return LAUNCHERS[request.launcher](request)


def this_rank(env: dict | None = None) -> Distributed | None:
    """This process's place in the run if a launcher started it as a rank (else None: it is
    the launcher)."""
    env = os.environ if env is None else env
    for cls in LAUNCHERS.values():
        placement = cls.placement(env)
        if placement is not None:
            return placement
    return None


class Launcher:
    name = ""

    def __init__(self, request: LaunchRequest) -> None:
        self.request = request
        self.runtime = runtime_for(request)

    def rank_command(self) -> list[str]:
        """What every task runs: this module again, with the same request; in the run's
        pinned image when `--container` names a runtime (one container per rank)."""
        if self.runtime.name == "none":
            return [sys.executable, "-m", "dlbench.launch", *self.request.to_argv()]
        return self.runtime.command(self.runtime.rank_argv())

    def command(self) -> list[str]:
        raise NotImplementedError

    def launch(self) -> list[int | None]:
        """Start the run's tasks and wait for them; their exit codes (None: killed)."""
        raise NotImplementedError

    @staticmethod
    def placement(env) -> Distributed | None:
        raise NotImplementedError

    def previous_attempt(self) -> list[int | None] | None:
        """Exit codes of an earlier attempt to record instead of running (None: run)."""
        return None

    def verdict(self) -> dict | None:
        """The scheduler's word on the run ({"status", "reason"}), for launch.json."""
        return None


@register
class LocalLauncher(Launcher):
    """Every task a subprocess of this one, on this node. Even one rank runs in its own
    process: a framework that aborts (e.g. TensorFlow on an mmap failure under the memory
    cap) must not take the launcher with it."""

    name = "local"

    def command(self) -> list[str]:
        if self.runtime.srun_options():  # a SPANK plug-in's runtime (pyxis) exists only under srun
            sys.exit(f"run.container: {self.runtime.name} starts ranks through srun: set run.launcher: srun")
        return self.rank_command()

    def rank_environment(self, rank: int, port: int) -> dict:
        layout = run_layout(self.request.coords)
        return dict(
            os.environ,
            DLBENCH_RANK=str(rank),
            DLBENCH_WORLD_SIZE=str(layout.tasks),
            DLBENCH_LOCAL_RANK=str(rank),
            DLBENCH_LOCAL_WORLD_SIZE=str(layout.tasks_per_node),
            DLBENCH_MASTER_ADDR="127.0.0.1",
            DLBENCH_MASTER_PORT=str(port),
            DLBENCH_NODE=socket.gethostname(),
        )

    @staticmethod
    def placement(env) -> Distributed | None:
        if "DLBENCH_RANK" not in env:
            return None
        return Distributed(
            rank=int(env["DLBENCH_RANK"]),
            world_size=int(env["DLBENCH_WORLD_SIZE"]),
            local_rank=int(env["DLBENCH_LOCAL_RANK"]),
            local_world_size=int(env["DLBENCH_LOCAL_WORLD_SIZE"]),
            master_addr=env["DLBENCH_MASTER_ADDR"],
            master_port=int(env["DLBENCH_MASTER_PORT"]),
            node=env.get("DLBENCH_NODE", socket.gethostname()),
            # Every node's address in node order (what srun ranks get from Slurm), for a
            # multi-node layout started by hand, e.g. several "nodes" on one host in a test.
            endpoints={"nodes": env["DLBENCH_NODES"].split(",")} if env.get("DLBENCH_NODES") else {},
        )

    def launch(self) -> list[int | None]:
        coords = self.request.coords
        if coords.scale_obj.nodes != 1:
            sys.exit(f"scale {coords.scale}: {coords.scale_obj.nodes} nodes need a Slurm allocation (--launcher srun)")
        port = free_port()
        procs = [
            subprocess.Popen(self.command(), env=self.rank_environment(r, port))
            for r in range(run_layout(coords).tasks)
        ]
        return wait_for_ranks(procs, self.request.stop_after_s)


@register
class SrunLauncher(Launcher):
    """One `srun` step inside the run's Slurm job (dlbench.launch.slurm), which keeps slurm.json."""

    name = "srun"

    def command(self) -> list[str]:
        coords, request = self.request.coords, self.request
        scale, per_node = coords.scale_obj, run_layout(coords).tasks_per_node
        return slurm.srun_command(
            scale.nodes,
            per_node,
            slurm.cpus_per_task(request.threads, per_node),
            request.device,
            self.rank_command(),
            overlap="SLURM_STEP_ID" in os.environ,
            job_name=f"dlbench-{coords.framework}-{coords.scale}",
            gpus_per_node=scale.devices_per_node,
            container_options=self.runtime.srun_options(),
            knobs=request.slurm_request(),
        )

    def launch(self) -> list[int | None]:
        return slurm.launch(self.request, self.command())

    @staticmethod
    def placement(env) -> Distributed | None:
        if "SLURM_PROCID" in env and "DLBENCH_SRUN" in env:
            return slurm.distributed_from_environment(env)
        return None

    def previous_attempt(self) -> list[int | None] | None:
        # Slurm ended an earlier attempt (scancel, time limit) before it wrote launch.json:
        # a retry moves its files to attempt<k>/; a later invocation records it as it ended.
        return slurm.previous_attempt(self.request.run_dir, run_layout(self.request.coords).tasks)

    def verdict(self) -> dict | None:
        status, reason = slurm.outcome(self.request.run_dir)
        return {"status": status, "reason": reason} if status else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# After a rank died (a signal, or a non-zero exit: ranks exit 0 and leave their status in
# their step log), how long the others get to end on their own before the launcher stops them:
# a survivor blocked in a collective on its dead peer would otherwise wait for the time limit.
RANK_DEATH_GRACE_S = 10.0
POLL_S = 0.2


def wait_for_ranks(
    procs: list[subprocess.Popen], stop_after_s: int | None, grace_s: float = RANK_DEATH_GRACE_S
) -> list[int | None]:
    """Wait for every rank; past `stop_after_s`, or `grace_s` after a rank died while others
    still run, stop those left (their exit code: None)."""
    deadline = time.monotonic() + stop_after_s if stop_after_s else None
    grace_end = None
    while None in [proc.poll() for proc in procs]:  # a list: every rank polled, every time
        now = time.monotonic()
        dead = [i for i, proc in enumerate(procs) if proc.returncode not in (None, 0)]
        if dead and grace_end is None:
            grace_end = now + grace_s
            print(
                f"[dlbench] {rank_death(procs[dead[0]].returncode, dead[0])}: the other ranks get {grace_s:.0f} s "
                "to end, then the launcher stops them",
                file=sys.stderr,
                flush=True,
            )
        if (deadline is not None and now >= deadline) or (grace_end is not None and now >= grace_end):
            left = [i for i, proc in enumerate(procs) if proc.poll() is None]
            stop([procs[i] for i in left])
            return [None if i in left else proc.returncode for i, proc in enumerate(procs)]
        time.sleep(POLL_S)
    return [proc.returncode for proc in procs]


def stop(procs: list[subprocess.Popen], grace_s: float = 10) -> None:
    """SIGTERM first (a `podman run` passes it on to its container), SIGKILL what is left."""
    for proc in procs:
        proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
