"""The frameworks' own profilers over a profiled run's measured window, by the name a plug-in
declares (`Capabilities.profiler`). Each writes a Chrome/Perfetto trace below the run's
`profile/` directory (dlbench.analysis.profiles ranks its operations); `start()` and
`stop()` are called by the worker at the window's ends, after their sync. Stdlib only: a
profiler imports its framework when it starts.
"""

from __future__ import annotations

from pathlib import Path

PROFILERS: dict[str, type] = {}


def registers(name: str):
    def register(cls: type) -> type:
        PROFILERS[name] = cls
        cls.name = name
        return cls

    return register


class Profiler:
    name = ""

    def __init__(self, out_dir: str | Path, on_cuda: bool):
        self.out_dir, self.on_cuda = Path(out_dir), on_cuda

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


@registers("torch.profiler")
class TorchProfiler(Profiler):
    """torch.profiler over CPU operators (and CUDA kernels on a GPU), its Chrome trace exported."""

    def start(self) -> None:
        import torch.profiler as tp

        activities = [tp.ProfilerActivity.CPU] + ([tp.ProfilerActivity.CUDA] if self.on_cuda else [])
        self.profile = tp.profile(activities=activities)
        self.profile.start()

    def stop(self) -> None:
        self.profile.stop()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # Gzipped (torch writes .gz itself): a GPU step's trace is megabytes of JSON.
        self.profile.export_chrome_trace(str(self.out_dir / "trace.json.gz"))


@registers("jax.profiler")
class JaxProfiler(Profiler):
    """jax.profiler's trace (TensorBoard's xplane, and the Chrome trace beside it)."""

    def start(self) -> None:
        import jax

        jax.profiler.start_trace(str(self.out_dir), create_perfetto_trace=True)

    def stop(self) -> None:
        import jax

        jax.profiler.stop_trace()


@registers("tf.profiler")
class TensorFlowProfiler(Profiler):
    """TensorFlow's profiler (TensorBoard's Profile tab reads its xplane)."""

    def start(self) -> None:
        import tensorflow as tf

        tf.profiler.experimental.start(str(self.out_dir))

    def stop(self) -> None:
        import tensorflow as tf

        tf.profiler.experimental.stop()
