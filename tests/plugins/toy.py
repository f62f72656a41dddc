"""A framework in one file: a linear softmax classifier "trained" with numpy SGD on one
synthetic batch. tests/test_plugin_toy.py runs it through the whole pipeline, found through
DLBENCH_FRAMEWORK_PATH=tests/plugins (docs/plugins.md); nothing else names it."""

from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.plugin import Capabilities, Strategy

CAPABILITIES = Capabilities(
    label="Toy (numpy)",
    colour="#2ca02c",
    models=("resnet50",),  # in name only: a linear model over the image's pixels
    precisions=("fp32",),
    strategies=(Strategy("replicas", "independent numpy replicas, no communication"),),
    env="pytorch",  # numpy is there; a plug-in outside the repository has no envs/ lock of its own
)
CLASSES = 10


class Runner(BaseRunner):
    def build(self) -> None:
        import numpy as np

        self.np, spec = np, self.spec
        rng = np.random.default_rng(spec.seed)
        pixels = 3 * (spec.image_size or 32) ** 2
        self.x = rng.standard_normal((spec.batch, pixels)).astype(np.float32)
        self.y = rng.integers(0, CLASSES, spec.batch)
        self.w = np.zeros((pixels, CLASSES), np.float32)

    def step(self, batch=None):
        np, rows = self.np, self.np.arange(len(self.y))
        logits = self.x @ self.w
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, self.y]).mean()
        p[rows, self.y] -= 1.0
        self.w -= 0.01 * self.x.T @ p / len(self.y)
        return loss

    def describe(self) -> dict:
        return {"version": self.np.__version__, "device_name": "cpu", "trainable_params": self.w.size}
