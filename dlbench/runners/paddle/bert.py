"""BERT-base pre-training in paddle.nn (Paddle ships no BERT; PaddleNLP is not locked): Hugging
Face BertForPreTraining's layers and parameter count (110 106 428, the MLM decoder tied to the
word embeddings) from paddle.nn.TransformerEncoder (post-norm, GELU), the masked-LM and
next-sentence losses, and its synthetic and real batches. Imports Paddle: only `Runner.build`
imports this module."""

from __future__ import annotations

import numpy as np
import paddle
from paddle import nn

from dlbench.recipe import BERT_BASE, MASK_TOKEN_ID, MLM_WEIGHT_EPSILON

IGNORE = -100  # labels of positions that are no masked-LM target


class BertForPreTraining(nn.Layer):
    def __init__(self, config: dict = BERT_BASE) -> None:
        super().__init__()
        hidden, eps = config["hidden_size"], config["layer_norm_eps"]
        init = nn.initializer.TruncatedNormal(std=config["initializer_range"])
        self.word = nn.Embedding(config["vocab_size"], hidden, weight_attr=init)
        self.position = nn.Embedding(config["max_position_embeddings"], hidden, weight_attr=init)
        self.token_type = nn.Embedding(config["type_vocab_size"], hidden, weight_attr=init)
        self.embedding_norm = nn.LayerNorm(hidden, epsilon=eps)
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])
        layer = nn.TransformerEncoderLayer(
            hidden,
            config["num_attention_heads"],
            config["intermediate_size"],
            dropout=config["hidden_dropout_prob"],
            activation="gelu",
            attn_dropout=config["attention_probs_dropout_prob"],
            act_dropout=0.0,
            weight_attr=init,
        )
        self.encoder = nn.TransformerEncoder(layer, config["num_hidden_layers"])
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden, weight_attr=init), nn.Tanh())
        self.mlm_transform = nn.Sequential(
            nn.Linear(hidden, hidden, weight_attr=init), nn.GELU(), nn.LayerNorm(hidden, epsilon=eps)
        )
        self.mlm_bias = self.create_parameter([config["vocab_size"]], is_bias=True)
        self.next_sentence = nn.Linear(hidden, 2, weight_attr=init)

    def forward(self, input_ids, token_type_ids, attention_mask, labels, next_sentence_label):
        positions = paddle.arange(input_ids.shape[1]).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)
        x = self.dropout(self.embedding_norm(x))
        # Additive mask over the keys: 0 where attended, a large negative where padded.
        mask = (1.0 - attention_mask.astype(x.dtype).unsqueeze([1, 2])) * -1e4
        x = self.encoder(x, src_mask=mask)
        mlm = paddle.matmul(self.mlm_transform(x), self.word.weight, transpose_y=True) + self.mlm_bias
        nsp = self.next_sentence(self.pooler(x[:, 0]))
        labels = labels.reshape([-1])
        per_position = nn.functional.cross_entropy(
            mlm.astype("float32").reshape([-1, mlm.shape[-1]]), labels, ignore_index=IGNORE, reduction="none"
        )
        # google-research/bert's normalisation: over the targets only (Paddle's "mean" would
        # count the ignored positions), + epsilon as every runner (docs/frameworks/equivalence.md).
        weights = (labels != IGNORE).astype("float32")
        mlm_loss = per_position.sum() / (weights.sum() + MLM_WEIGHT_EPSILON)
        return mlm_loss + nn.functional.cross_entropy(nsp.astype("float32"), next_sentence_label)


def loss(model, *fields):
    """The pre-training loss (the model computes it: masked-LM + next-sentence)."""
    return model(*fields)


def fields(*batch):
    """A real-data batch as the step's arguments (already tensors)."""
    return batch


def synthetic_batch(batch: int, seq_len: int, seed: int) -> list:
    """Random tokens, 15 % of positions masked-LM targets, random next-sentence labels;
    sentence B the second half (as the PyTorch runner's synthetic batch)."""
    seq = seq_len
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, BERT_BASE["vocab_size"], (batch, seq))
    masked = rng.random((batch, seq)) < BERT_BASE["max_predictions_per_seq_fraction"]
    token_types = np.zeros((batch, seq), np.int64)
    token_types[:, seq // 2 :] = 1
    fields = (
        np.where(masked, MASK_TOKEN_ID, ids),
        token_types,
        np.ones((batch, seq), np.int64),
        np.where(masked, ids, IGNORE),
        rng.integers(0, 2, batch),
    )
    return [paddle.to_tensor(a.astype(np.int64)) for a in fields]


def real_batches(spec):
    """Batches of the tokenised examples (dlbench.data.bert) in memory, this rank's share, a
    new shuffle each epoch: no decoding for worker processes to do."""
    from dlbench.data import bert

    arrays = bert.load_examples(spec.data_dir)
    fields = (
        arrays["input_ids"],
        arrays["segment_ids"],
        arrays["input_mask"],
        bert.mlm_labels(arrays, IGNORE),
        arrays["next_sentence_labels"].reshape(-1),
    )
    fields = [a.astype(np.int64) for a in fields]
    dist, rng = spec.dist, np.random.default_rng(spec.seed)
    share = len(fields[0]) // dist.world_size
    if share < spec.batch:
        raise ValueError(
            f"{spec.data_dir}: {len(fields[0])} examples cannot fill a batch of {spec.batch} "
            f"on each of {dist.world_size} ranks"
        )
    while True:
        order = rng.permutation(len(fields[0]))[dist.rank * share : (dist.rank + 1) * share]
        for start in range(0, share - spec.batch + 1, spec.batch):
            rows = order[start : start + spec.batch]
            yield [paddle.to_tensor(a[rows]) for a in fields]
