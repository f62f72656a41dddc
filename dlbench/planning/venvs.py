"""Where a framework's Python is: the site's (run.python), else its environment's under
DLBENCH_VENVS (default: the checkout's .venvs, shared by every working directory). Read by the
deployment (the runs) and by the compilers' memory estimates at planning."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from dlbench.runners import env_name, framework_names


def venvs_dir(repo: str, environ: Mapping = os.environ) -> str:
    return environ.get("DLBENCH_VENVS", os.path.join(repo, ".venvs"))


def venv_python(venvs: str, framework: str, device: str, site_pythons: Mapping) -> str:
    """The framework's Python: the site's (run.python), else its venv's."""
    site = site_pythons.get(framework)
    return site or os.path.join(venvs, env_of(framework, device), "bin", "python")


@functools.cache  # asked once per training job while the DAG is built
def env_of(name: str, device: str = "cpu") -> str:
    """A framework's environment on `device` (its capabilities' env or device_envs: a plug-in
    may share one); an environment's own name (analysis, a data format's) stays itself."""
    return env_name(name, device) if name in framework_names() else name
