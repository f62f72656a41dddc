"""MXNet model definitions and the synthetic batch (docs/frameworks/mxnet.md): Gluon
model-zoo CNNs (ResNets moved to v1.5) and an own Gluon BERT-base. Importing this module
does not import MXNet."""

from __future__ import annotations

from dlbench.models import IMAGE_CLASSES
from dlbench.recipe import BERT_BASE, MLM_WEIGHT_EPSILON

# model -> (model-zoo constructor, move the down-sampling stride to the 3x3 conv)
ZOO_BUILDERS = {
    "resnet50": ("resnet50_v1", True),
    "resnet152": ("resnet152_v1", True),
    "vgg16": ("vgg16", False),
    "inception_v3": ("inception_v3", False),
    "alexnet": ("alexnet", False),
}


def initialised(mx, net, initializer, ctxs):
    """`net` initialised on every context and hybridized (one cached static graph)."""
    net.initialize(initializer, ctx=ctxs)
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def image_net(mx, model: str):
    """The CNN's Gluon model-zoo block, not initialised (its symbol gives shapes without memory)."""
    from mxnet.gluon.model_zoo import vision

    name, v15 = ZOO_BUILDERS[model]
    net = getattr(vision, name)(pretrained=False, classes=IMAGE_CLASSES)
    if v15:
        _move_stride_to_3x3(net)
    if model == "inception_v3":
        _global_final_pool(net)
    return net


def bert_net(mx):
    """The BERT-base pre-training block, not initialised."""
    return _bert_pretraining_class(mx)(BERT_BASE, prefix="bert_")


def bert_initializer(mx):
    return mx.init.Normal(BERT_BASE["initializer_range"])


BERT_VARIANT = "own Gluon BERT-base pre-training (MLM + NSP, tied decoder)"


def image_variant(model: str) -> str:
    name, v15 = ZOO_BUILDERS[model]
    return f"gluon.model_zoo.vision.{name}" + (" with stride on the 3x3 conv (v1.5)" if v15 else "")


def _move_stride_to_3x3(net) -> None:
    """ResNet v1 -> v1.5: in each down-sampling BottleneckV1 the stride goes to the 3x3 conv."""
    for stage in net.features:
        for block in getattr(stage, "_children", {}).values():
            body = getattr(block, "body", None)
            if body is None or len(body) != 8:
                continue
            first, mid = body[0], body[3]
            if tuple(first._kwargs["stride"]) != (1, 1):
                mid._kwargs["stride"] = first._kwargs["stride"]
                first._kwargs["stride"] = (1, 1)


def _global_final_pool(net) -> None:
    """InceptionV3: Gluon's final AvgPool2D(8) is global at 299 px; make it global at any size
    (identical at 299 px; Gluon's fixed pool fails below it, where torchvision and Keras build)."""
    from mxnet.gluon import nn

    children = net.features._children
    for key, block in children.items():
        if isinstance(block, nn.AvgPool2D) and tuple(block._kwargs["kernel"]) == (8, 8):
            children[key] = nn.GlobalAvgPool2D()


def image_initializer(mx, model: str):
    """He/MSRA for the BatchNorm networks (Gluon's ImageNet recipes); Glorot uniform for VGG-16
    and AlexNet, which have no BatchNorm and diverge under He init with SGD lr 0.01."""
    if model in ("vgg16", "alexnet"):
        return mx.init.Xavier()
    return mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)


def _encoder_layer_class(nn):
    class EncoderLayer(nn.HybridBlock):
        def __init__(self, c, **kwargs):
            super().__init__(**kwargs)
            units, hidden, eps = c["hidden_size"], c["intermediate_size"], c["layer_norm_eps"]
            self._heads = c["num_attention_heads"]
            with self.name_scope():
                # One fused projection; its output is read as interleaved (head, q|k|v, dim),
                # the layout MXNet's fused self-attention kernels expect.
                self.qkv = nn.Dense(3 * units, flatten=False, in_units=units, prefix="qkv_")
                self.proj = nn.Dense(units, flatten=False, in_units=units, prefix="proj_")
                self.ln_att = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_att_")
                self.ffn_1 = nn.Dense(hidden, flatten=False, in_units=units, prefix="ffn1_")
                self.ffn_2 = nn.Dense(units, flatten=False, in_units=hidden, prefix="ffn2_")
                self.ln_ffn = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_ffn_")
                self.drop_att = nn.Dropout(c["attention_probs_dropout_prob"])
                self.drop = nn.Dropout(c["hidden_dropout_prob"])

        def hybrid_forward(self, F, x, attention_bias):
            # x: (length, batch, units); attention_bias: (batch * heads, 1, length)
            qkv = self.qkv(x)
            scores = F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=self._heads)
            scores = F.broadcast_add(scores, attention_bias)
            weights = self.drop_att(F.softmax(scores, axis=-1))
            context = F.contrib.interleaved_matmul_selfatt_valatt(qkv, weights, heads=self._heads)
            x = self.ln_att(x + self.drop(self.proj(context)))
            h = self.ffn_2(F.LeakyReLU(self.ffn_1(x), act_type="gelu"))
            return self.ln_ffn(x + self.drop(h))

    return EncoderLayer


def _bert_pretraining_class(mx):
    """Gluon BERT pre-training model (defined lazily: it subclasses MXNet classes)."""
    from mxnet.gluon import nn

    encoder_layer = _encoder_layer_class(nn)

    class BertForPretraining(nn.HybridBlock):
        def __init__(self, c, **kwargs):
            super().__init__(**kwargs)
            units, eps, vocab = c["hidden_size"], c["layer_norm_eps"], c["vocab_size"]
            self._units, self._max_length = units, c["max_position_embeddings"]
            self._heads = c["num_attention_heads"]
            with self.name_scope():
                self.word_embed = nn.Embedding(vocab, units, prefix="word_embed_")
                self.type_embed = nn.Embedding(c["type_vocab_size"], units, prefix="type_embed_")
                self.position_weight = self.params.get("position_weight", shape=(self._max_length, units))
                self.ln_embed = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_embed_")
                self.drop = nn.Dropout(c["hidden_dropout_prob"])
                self.layers = nn.HybridSequential(prefix="layers_")
                with self.layers.name_scope():
                    for i in range(c["num_hidden_layers"]):
                        self.layers.add(encoder_layer(c, prefix=f"l{i}_"))
                self.pooler = nn.Dense(units, activation="tanh", in_units=units, prefix="pooler_")
                self.nsp = nn.Dense(2, in_units=units, prefix="nsp_")
                self.mlm_dense = nn.Dense(units, flatten=False, in_units=units, prefix="mlm_dense_")
                self.mlm_ln = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="mlm_ln_")
                # The decoder shares the word embedding's parameter dict (gluonnlp's way of
                # tying): its `weight` is the embedding matrix; its bias is its own.
                self.mlm_decoder = nn.Dense(
                    vocab, flatten=False, in_units=units, params=self.word_embed.collect_params()
                )
            assert self.mlm_decoder.weight is self.word_embed.weight, "MLM decoder not tied to the embedding"

        def hybrid_forward(self, F, ids, types, positions, input_mask, position_weight):
            # ids, types, input_mask: (batch, length); positions: (batch * masked,) flat indices
            # into the (batch * length) token rows. Padding (input_mask 0) gets -10000 added to
            # its attention scores, as Google's BERT does: no position attends to it.
            x = self.word_embed(ids) + self.type_embed(types)
            steps = F.contrib.arange_like(ids, axis=1)
            pos_embed = F.Embedding(steps, position_weight, input_dim=self._max_length, output_dim=self._units)
            x = F.broadcast_add(x, F.expand_dims(pos_embed, axis=0))
            x = self.drop(self.ln_embed(x))
            bias = F.broadcast_axis(F.expand_dims(F.expand_dims(input_mask, axis=1), axis=1), axis=1, size=self._heads)
            bias = (F.reshape(bias, shape=(-3, 0, 0)) - 1) * 10000.0  # (batch * heads, 1, length)
            x = F.transpose(x, axes=(1, 0, 2))  # (length, batch, units)
            for i in range(len(self.layers)):
                x = self.layers[i](x, bias)
            x = F.transpose(x, axes=(1, 0, 2))  # (batch, length, units)
            nsp_logits = self.nsp(self.pooler(F.squeeze(F.slice_axis(x, axis=1, begin=0, end=1), axis=1)))
            rows = F.take(F.reshape(x, shape=(-1, self._units)), positions)
            h = self.mlm_ln(F.LeakyReLU(self.mlm_dense(rows), act_type="gelu"))
            return self.mlm_decoder(h), nsp_logits

    return BertForPretraining


def pretraining_loss(mx, loss_fn, logits, labels, masked: int):
    """Per-sample losses of one context's BERT batch (the trainer divides their sum by the
    global batch): each sample carries batch / (sum(weight) + 1e-5) times its weighted
    masked-LM slot losses, so their mean is dlbench.recipe's reference loss of the batch."""
    mlm_logits, nsp_logits = logits
    mlm_ids, nsp_labels, weights = labels
    slots = loss_fn(mlm_logits, mlm_ids.reshape((-1,))).reshape((-1, masked)) * weights
    share = weights.shape[0] / (weights.sum() + MLM_WEIGHT_EPSILON)
    return mx.nd.broadcast_mul(slots.sum(axis=1), share) + loss_fn(nsp_logits, nsp_labels)


def image_batch(mx, spec, ctx):
    """A synthetic image batch (normal noise) and its labels on `ctx`: ((images,), (labels,))."""
    b, size = spec.batch, spec.image_size
    inputs = (mx.nd.random.normal(shape=(b, 3, size, size), ctx=ctx),)
    return inputs, (mx.nd.random.randint(0, IMAGE_CLASSES, shape=(b,), ctx=ctx).astype("float32"),)


def replicated(inputs, labels, ctxs) -> list:
    """[(inputs, labels)] per context: the first context's batch copied to the others (every
    device the same batch, so the reduced update equals a single-device run's)."""
    return [(inputs, labels)] + [
        (tuple(x.as_in_context(c) for x in inputs), tuple(y.as_in_context(c) for y in labels)) for c in ctxs[1:]
    ]


def bert_batch(mx, ctx, b: int, length: int, masked: int):
    """A synthetic pre-training batch on `ctx`: `masked` distinct masked-LM positions per sequence."""
    vocab = BERT_BASE["vocab_size"]
    ids = mx.nd.random.randint(0, vocab, shape=(b, length), ctx=ctx).astype("float32")
    types = mx.nd.concat(mx.nd.zeros((b, length // 2), ctx=ctx), mx.nd.ones((b, length - length // 2), ctx=ctx), dim=1)
    # Flat indices of `masked` distinct positions per sequence into (batch*length) rows.
    pos = mx.nd.stack(*[mx.nd.random.shuffle(mx.nd.arange(length, ctx=ctx))[:masked] for _ in range(b)])
    pos = pos + mx.nd.arange(b, ctx=ctx).reshape((b, 1)) * length
    mlm_labels = mx.nd.random.randint(0, vocab, shape=(b, masked), ctx=ctx).astype("float32")
    weights = mx.nd.ones((b, masked), ctx=ctx)
    labels = (mlm_labels, mx.nd.random.randint(0, 2, shape=(b,), ctx=ctx).astype("float32"), weights)
    # No padding in synthetic sequences: every position is attended to.
    return (ids, types, pos.reshape((-1,)), mx.nd.ones((b, length), ctx=ctx)), labels
