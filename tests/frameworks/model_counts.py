"""Each framework's models as its runner builds them, counted in the framework's environment:
trainable parameters, and forward FLOPs at 224 px (2 x the multiply-adds of the convolutions
and matrix products; pooling, normalisation and activations are not counted, as PyTorch's
FlopCounterMode, which dlbench/analysis/flops.py uses, does not count them). BERT-base: parameters only."""

from __future__ import annotations

import json
import textwrap

from tests.conftest import framework_python
from tests.frameworks.equivalence import run_script

SIZE = 224

_COMMON = """
import json, math, sys
models_wanted, size = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
"""

SCRIPTS = {
    "pytorch": """
        import torch
        from torch.utils.flop_counter import FlopCounterMode
        from dlbench.runners.pytorch import models
        for name in models_wanted:
            text = name == "bert_base"
            with torch.device("meta"):
                m = models.bert_for_pretraining() if text else models.image_model(name)
            counts = {"params": sum(p.numel() for p in m.parameters() if p.requires_grad)}
            if not text:
                with FlopCounterMode(display=False) as counter:
                    m.eval()(torch.empty(1, 3, size, size, device="meta"))
                counts["flops"] = counter.get_total_flops()
            out[name] = counts
    """,
    "tensorflow": """
        import keras, tensorflow as tf
        from dlbench.runners.tensorflow import cnn, _bert_model, BERT_BASE
        for name in models_wanted:
            if name == "bert_base":
                m = _bert_model(keras, tf, BERT_BASE, 128)
                out[name] = {"params": int(sum(math.prod(v.shape) for v in m.trainable_variables))}
                continue
            m = cnn.ImageModel(name, size, 1000, 0, {})
            graph = tf.function(lambda x: m(x, training=False)).get_concrete_function(
                tf.TensorSpec([1, size, size, 3])).graph
            flops = 0
            for op in graph.get_operations():
                if op.type == "Conv2D":
                    kh, kw, cin, _ = op.inputs[1].shape
                    flops += 2 * math.prod(op.outputs[0].shape) * kh * kw * cin
                elif op.type == "MatMul":
                    a = op.inputs[0].shape
                    flops += 2 * math.prod(op.outputs[0].shape) * (a[0] if op.get_attr("transpose_a") else a[1])
            out[name] = {"params": int(sum(math.prod(v.shape) for v in m.trainable_variables)), "flops": flops}
            keras.backend.clear_session()
    """,
    "mxnet": """
        import mxnet as mx
        from dlbench.runners.mxnet import models
        for name in models_wanted:
            net = models.bert_net(mx) if name == "bert_base" else models.image_net(mx, name)
            if name == "bert_base":
                shapes = {"ids": (1, 128), "types": (1, 128), "positions": (20,), "mask": (1, 128)}
                sym = mx.sym.Group(list(net(*[mx.sym.var(k) for k in shapes])))
            else:
                shapes = {"data": (1, 3, size, size)}
                sym = net(mx.sym.var("data"))
            args, _, _ = sym.infer_shape(**shapes)
            counts = {"params": sum(math.prod(s) for n, s in zip(sym.list_arguments(), args) if n not in shapes)}
            if name != "bert_base":
                internals = sym.get_internals()
                _, outs, _ = internals.infer_shape(**shapes)
                shape_of = dict(zip(internals.list_outputs(), outs))
                flops = 0
                nodes = json.loads(sym.tojson())["nodes"]
                for node in nodes:
                    if node["op"] in ("Convolution", "FullyConnected"):
                        weight = shape_of[nodes[node["inputs"][1][0]]["name"]]
                        flops += 2 * math.prod(shape_of[node["name"] + "_output"]) * math.prod(weight[1:])
                counts["flops"] = flops
            out[name] = counts
    """,
    "jax": """
        import jax, jax.numpy as jnp
        from dlbench.runners.jax import models

        def flops_of(jaxpr):
            total = 0
            for eqn in jaxpr.eqns:
                out = eqn.outvars[0].aval.shape
                if eqn.primitive.name == "conv_general_dilated":
                    kh, kw, cin, _ = eqn.invars[1].aval.shape  # Flax kernels are HWIO
                    total += 2 * math.prod(out) * kh * kw * cin // eqn.params["feature_group_count"]
                elif eqn.primitive.name == "dot_general":
                    (contracting, _), _ = eqn.params["dimension_numbers"]
                    lhs = eqn.invars[0].aval.shape
                    total += 2 * math.prod(out) * math.prod(lhs[d] for d in contracting)
                for value in eqn.params.values():
                    inner = getattr(value, "jaxpr", value)
                    if hasattr(inner, "eqns"):
                        total += flops_of(inner)
            return total

        for name in models_wanted:
            m = models.build(name)
            keys = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
            x = jnp.zeros((1, size, size, 3))
            variables = jax.eval_shape(lambda: m.init(keys, x, train=False))
            jaxpr = jax.make_jaxpr(lambda v, x: m.apply(v, x, train=False))(variables, x)
            out[name] = {"params": sum(v.size for v in jax.tree_util.tree_leaves(variables["params"])),
                         "flops": flops_of(jaxpr.jaxpr)}
    """,
    "paddle": """
        import paddle
        from dlbench.runners.paddle import train
        flops = [0]

        def conv(layer, inputs, output):  # weight (out, in / groups, kh, kw)
            flops[0] += 2 * math.prod(output.shape) * math.prod(layer.weight.shape[1:])

        def linear(layer, inputs, output):  # weight (in, out)
            flops[0] += 2 * math.prod(output.shape) * layer.weight.shape[0]

        for name in models_wanted:
            if name == "bert_base":
                from dlbench.runners.paddle import bert
                model = bert.BertForPreTraining()
                out[name] = {"params": sum(int(p.size) for p in model.parameters() if not p.stop_gradient)}
                continue
            model, params = train.image_model(name, 0)
            for layer in model.sublayers():
                hook = {paddle.nn.Conv2D: conv, paddle.nn.Linear: linear}.get(type(layer))
                if hook:
                    layer.register_forward_post_hook(hook)
            flops[0] = 0
            with paddle.no_grad():
                model.eval()(paddle.zeros([1, 3, size, size]))
            out[name] = {"params": params, "flops": flops[0]}
    """,
}


def count(framework: str, models: list[str]) -> dict:
    """{model: {"params": n, "flops": f}} as `framework`'s runner builds them."""
    code = _COMMON + textwrap.dedent(SCRIPTS[framework]) + "print('RESULT ' + json.dumps(out))\n"
    args = (json.dumps(models), str(SIZE))
    return json.loads(run_script(framework_python(framework), code, *args, env={"JAX_PLATFORMS": "cpu"}))
