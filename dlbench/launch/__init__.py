"""Start the processes of one run, locally or through `srun`.

    python -m dlbench.launch --framework pytorch --model resnet50 ... --run-dir DIR

The command line is a `LaunchRequest` (request.py: the one definition; the training rule
and the batch search build it there too). As the launcher, this module starts the run's
tasks (`dlbench.runners.run_layout(coords).tasks`, from the strategy's process layout: one per device, one
per node for single-process multi-device strategies, one per node with rank 0 as
coordinator for parameter-server strategies) through the request's launcher (launchers.py:
local subprocesses, or `srun` inside a Slurm allocation), waits for them and writes
`launch.json` (record.py: rank exit codes, wall time, Slurm's verdict): the file Snakemake
tracks. As a rank (placed by its launcher's environment) it runs `dlbench.launch.worker.run_rank`,
which writes `rank<k>.steps.jsonl`; a helper rank (beyond the layout's step logs) runs the
framework module's `serve()` instead and writes no step log (run.py). With `--container
podman|apptainer` (container.py) the launcher first checks the framework's image against its
lock, then starts every rank inside that image, one container per rank; an image that is not
the pinned one starts no rank and `launch.json` says why.

A failed, OOM or killed run is a result, not an error: the launcher exits 0 once it has
written `launch.json`, so Snakemake never deletes the raw logs of a failed run and the
rest of the grid goes on. It refuses to start where raw logs already exist. Stdlib only.
"""

from dlbench.launch.request import TIME_LIMIT_GRACE_S, LaunchRequest

__all__ = ["TIME_LIMIT_GRACE_S", "LaunchRequest"]
