"""A tiny BERT (BERT-base's code, tiny sizes) trained by each framework's runner on a fixed batch
of real pre-training examples (padding, attention mask, weighted masked-LM slots), in the
framework's environment: a test that every framework's BERT trains in seconds."""

from __future__ import annotations

import json
import math
import random
import textwrap
from pathlib import Path

from tests.frameworks.equivalence import run_script

SEQ_LEN = 32
VOCAB = 2000
# Only the sizes change (dropout off: a fixed batch's loss must fall monotonically enough).
TINY_BERT = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 64,
}

# At initialisation every token and both next-sentence classes are about equally likely.
INITIAL_LOSS = math.log(VOCAB) + math.log(2)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from dlbench import recipe
    recipe.BERT_BASE.update(json.loads(sys.argv[1]))  # before any runner module reads it
    import importlib
    from dlbench.coords import RunCoords
    from dlbench.runners.base import RunSpec

    framework, data_dir, steps = sys.argv[2], sys.argv[3], int(sys.argv[4])
    Runner = importlib.import_module(f"dlbench.runners.{framework}").Runner
    coords = RunCoords(framework, "bert_base", "fp32", "real", "4", "1x1", "single", 0)
    spec = RunSpec(coords=coords, batch=4, image_size=0, seq_len=int(sys.argv[5]), threads=2, device="cpu",
                   data_dir=data_dir)
    runner = Runner(spec)
    runner.build()
    batch = runner.next_batch()
    losses = [runner.loss_value(runner.step(batch)) for _ in range(steps)]
    print("RESULT " + json.dumps({"losses": losses, "params": runner.describe().get("trainable_params")}))
    """
)


def write_examples(directory: Path) -> Path:
    """Pre-training examples with padding (short documents) and padded prediction slots."""
    from dlbench.data import bert

    rng = random.Random(0)
    documents = [[[rng.randrange(5, VOCAB) for _ in range(rng.randrange(3, 9))] for _ in range(4)] for _ in range(6)]
    arrays = bert.make_examples(
        documents,
        examples=8,
        seq_len=SEQ_LEN,
        max_predictions=5,
        masked_lm_prob=0.15,
        short_seq_prob=0.5,
        vocab_size=VOCAB,
        seed=0,
    )
    assert (arrays["input_mask"] == 0).any() and (arrays["masked_lm_weights"] == 0).any(), "no padding to mask"
    directory.mkdir(parents=True, exist_ok=True)
    bert.save_npz(directory / bert.EXAMPLES_NAME, arrays)
    return directory


def train(python: Path, framework: str, data_dir: Path, steps: int = 12, env: dict | None = None) -> dict:
    """{"losses": [...], "params": n} of `steps` steps on one fixed batch."""
    args = (json.dumps(TINY_BERT), framework, str(data_dir), str(steps), str(SEQ_LEN))
    return json.loads(run_script(python, SCRIPT, *args, env=env))


# -- the masked-LM loss normalisation, the same in every framework ---------------------------
# Logits of 2 sequences x 3 prediction slots over 5 tokens; the second sequence's last slot is
# padding (weight 0). The loss of google-research/bert's run_pretraining: masked-LM
# sum(w x loss) / (sum(w) + 1e-5) over the batch's slots, plus the mean next-sentence loss.
LOSS_CASE = {
    "mlm_logits": [
        [[2.0, 0.5, -1.0, 0.0, 1.0], [0.1, 0.2, 0.3, 0.4, 0.5], [3.0, -2.0, 0.0, 1.0, 0.0]],
        [[-1.0, 1.0, 0.0, 2.0, 0.5], [0.0, 0.0, 4.0, 0.0, 0.0], [9.0, 9.0, -9.0, 9.0, 9.0]],
    ],
    "mlm_ids": [[0, 4, 3], [3, 2, 2]],
    "mlm_weights": [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]],
    "nsp_logits": [[0.3, -0.3], [1.5, 0.5]],
    "nsp_labels": [0, 1],
}
# The script prints the framework's loss of the case (each computes it through the runner's code).
LOSS_SCRIPTS = {
    "pytorch": """
        import torch
        from types import SimpleNamespace
        from dlbench.runners.pytorch import models
        logits = torch.tensor(case["mlm_logits"])  # as if the sequences were 3 tokens long
        labels = torch.tensor(case["mlm_ids"]).masked_fill(torch.tensor(case["mlm_weights"]) == 0, -100)
        out = SimpleNamespace(prediction_logits=logits, seq_relationship_logits=torch.tensor(case["nsp_logits"]))
        loss = float(models.pretraining_loss(torch, out, labels, torch.tensor(case["nsp_labels"])))
    """,
    "tensorflow": """
        import tensorflow as tf
        from dlbench.runners.tensorflow import models
        logits = (tf.constant(case["mlm_logits"]), tf.constant(case["nsp_logits"]))
        inputs = {"input_ids": None, "token_type_ids": None, "masked_positions": None,
                  "masked_ids": tf.constant(case["mlm_ids"]), "masked_weights": tf.constant(case["mlm_weights"]),
                  "nsp_labels": tf.constant(case["nsp_labels"])}
        per_example = models.BertPretraining.per_example_loss(None, tf, lambda x, training: logits, inputs, True)
        loss = float(tf.nn.compute_average_loss(per_example, global_batch_size=2))
    """,
    "mxnet": """
        import mxnet as mx
        from dlbench.runners.mxnet import models
        a = {k: mx.nd.array(v) for k, v in case.items()}
        logits = (a["mlm_logits"].reshape((-1, 5)), a["nsp_logits"])
        labels = (a["mlm_ids"], a["nsp_labels"], a["mlm_weights"])
        per_sample = models.pretraining_loss(mx, mx.gluon.loss.SoftmaxCrossEntropyLoss(), logits, labels, 3)
        loss = float(per_sample.mean().asscalar())
    """,
    # Paddle's model computes its loss in forward(): its heads are swapped for layers that
    # return the case's logits (decoder weight = identity over a 5-token vocabulary).
    "paddle": """
        import paddle
        from dlbench.runners.paddle import bert
        config = dict(bert.BERT_BASE, vocab_size=5, hidden_size=5, num_attention_heads=1,
                      num_hidden_layers=1, intermediate_size=8, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
        model = bert.BertForPreTraining(config)

        class Fixed(paddle.nn.Layer):
            def __init__(self, value):
                super().__init__()
                self.value = paddle.to_tensor(value)

            def forward(self, x):
                return self.value

        model._sub_layers["mlm_transform"] = Fixed(case["mlm_logits"])
        model._sub_layers["pooler"] = Fixed([[0.0] * 5] * 2)
        model._sub_layers["next_sentence"] = Fixed(case["nsp_logits"])
        model.word.weight.set_value(paddle.eye(5))
        model.mlm_bias.set_value(paddle.zeros([5]))
        ids = paddle.zeros([2, 3], dtype="int64")
        labels = paddle.to_tensor(case["mlm_ids"], dtype="int64")
        labels = paddle.where(paddle.to_tensor(case["mlm_weights"]) > 0, labels, paddle.full_like(labels, bert.IGNORE))
        nsp = paddle.to_tensor(case["nsp_labels"], dtype="int64")
        loss = float(bert.loss(model, ids, ids, paddle.ones([2, 3], dtype="int64"), labels, nsp))
    """,
}


def reference_loss() -> float:
    import numpy as np

    def cross_entropy(logits, labels):
        logits = np.asarray(logits, np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        return -np.take_along_axis(log_probs, np.asarray(labels)[..., None], -1)[..., 0]

    c = LOSS_CASE
    weights = np.asarray(c["mlm_weights"])
    mlm = (cross_entropy(c["mlm_logits"], c["mlm_ids"]) * weights).sum() / (weights.sum() + 1e-5)
    return float(mlm + cross_entropy(c["nsp_logits"], c["nsp_labels"]).mean())


def framework_loss(python: Path, framework: str) -> float:
    code = "import json, sys\ncase = json.loads(sys.argv[1])\n" + textwrap.dedent(LOSS_SCRIPTS[framework])
    return float(run_script(python, code + "print('RESULT', loss)\n", json.dumps(LOSS_CASE)))
