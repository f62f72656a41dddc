"""A framework in one file: a linear softmax classifier "trained" with numpy SGD on one
synthetic batch. tests/test_plugin_toy.py runs it through the whole pipeline, found through
DLBENCH_FRAMEWORK_PATH=tests/plugins (docs/plugins.md); nothing else names it."""

import os
import time

from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.base import Workload, Workloads
from dlbench.runners.plugin import Capabilities, Strategy

WORKLOADS = Workloads("toy")
CLASSES = 10


@WORKLOADS.registers
class LinearSoftmax(Workload):
    """Its one workload: the image models in name only, a linear model over the image's pixels."""

    kind = "image"
    models = ("resnet50", "vgg16")

    def __init__(self, spec, np):
        rng = np.random.default_rng(spec.seed)
        pixels = 3 * (spec.image_size or 32) ** 2
        self.np = np
        self.x = rng.standard_normal((spec.batch, pixels)).astype(np.float32)
        self.y = rng.integers(0, CLASSES, spec.batch)
        self.w = np.zeros((pixels, CLASSES), np.float32)

    def step(self):
        """One SGD step of softmax cross-entropy; returns its loss."""
        np, rows = self.np, self.np.arange(len(self.y))
        logits = self.x @ self.w
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, self.y]).mean()
        p[rows, self.y] -= 1.0
        self.w -= 0.01 * self.x.T @ p / len(self.y)
        return loss

    def describe(self) -> dict:
        return {"trainable_params": self.w.size}


CAPABILITIES = Capabilities(
    label="Toy (numpy)",
    colour="#2ca02c",
    models=WORKLOADS.models,
    precisions=("fp32",),
    strategies=(Strategy("replicas", "independent numpy replicas, no communication"),),
    env="pytorch",  # numpy is there; a plug-in outside the repository has no envs/ lock of its own
)


def planted_sleep(scale: str, repeat: int, environ=os.environ) -> float:
    """A planted step time for tests: DLBENCH_TOY_SLEEP=`1x1=0.02:0,1x2=0.02:0.03` makes each
    step at 1x2 sleep 0.02 s plus a per-repeat share of 0.03 s (a noisy cell: repeats differ,
    steps within a run do not). The shares follow the golden-ratio sequence, so any three
    repeats are far apart (random draws came out close in about 1 run in 20). Unset: no sleep."""
    for item in filter(None, environ.get("DLBENCH_TOY_SLEEP", "").split(",")):
        name, _, times = item.partition("=")
        if name == scale:
            base, _, jitter = times.partition(":")
            return float(base) + float(jitter or 0) * ((repeat * 0.6180339887) % 1.0)
    return 0.0


class Runner(BaseRunner):
    def build(self) -> None:
        import numpy as np

        self.np, spec = np, self.spec
        self.workload = WORKLOADS(spec.coords.model)(spec, np)
        self.sleep = planted_sleep(spec.coords.scale, spec.coords.repeat)

    def step(self, batch=None):
        loss = self.workload.step()
        time.sleep(self.sleep)
        return loss

    def describe(self) -> dict:
        return {"version": self.np.__version__, "device_name": "cpu", **self.workload.describe()}
