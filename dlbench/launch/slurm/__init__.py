"""dlbench inside a Slurm allocation, by concern (docs/slurm.md). Stdlib only: it runs inside
every framework environment.

- `hostlist`: Slurm's compressed host lists and tasks-per-node text;
- `environment`: the rank's side, its place in the run from Slurm's environment;
- `srun`: the launcher's side, one `srun` step per run (dlbench.launch's srun launcher);
- `record`: `slurm.json`, dlbench's record of the run's job;
- `attempts`: after Slurm ended a run, what the next attempt does and Slurm's verdict.
"""

from dlbench.launch.slurm.attempts import (
    job_state,
    outcome,
    previous_attempt,
    slurm_status,
    unsettled,
)
from dlbench.launch.slurm.environment import (
    EARLIER_ATTEMPT_ENV,
    PORT_STRIDE,
    distributed_from_environment,
    job_id_from_environment,
    master_port,
    node_address,
    settles_earlier_attempt,
)
from dlbench.launch.slurm.hostlist import (
    expand_hostlist,
    expand_tasks_per_node,
    format_addresses,
    parse_addresses,
    parse_node_addresses,
)
from dlbench.launch.slurm.record import EXIT_CODE_FILE, RECORD, attempt_number, read_record, write_record
from dlbench.launch.slurm.srun import (
    SlurmError,
    cpus_per_task,
    gpu_flag,
    launch,
    rank_environment,
    runtime_minutes,
    srun_command,
)

__all__ = [
    "EARLIER_ATTEMPT_ENV",
    "EXIT_CODE_FILE",
    "PORT_STRIDE",
    "RECORD",
    "SlurmError",
    "attempt_number",
    "cpus_per_task",
    "distributed_from_environment",
    "expand_hostlist",
    "expand_tasks_per_node",
    "format_addresses",
    "gpu_flag",
    "job_id_from_environment",
    "job_state",
    "launch",
    "master_port",
    "node_address",
    "outcome",
    "parse_addresses",
    "parse_node_addresses",
    "previous_attempt",
    "rank_environment",
    "read_record",
    "runtime_minutes",
    "settles_earlier_attempt",
    "slurm_status",
    "srun_command",
    "unsettled",
    "write_record",
]
