"""The models of every framework are the same models: at 224 px each framework's runner builds
every model it offers with the reference's trainable parameters and forward FLOPs (2 x the
multiply-adds of convolutions and matrix products, tests/frameworks/model_counts.py), except
the differences named below (docs/frameworks/equivalence.md says why they stay).

Reference: torchvision's models and Hugging Face's BertForPreTraining (the PyTorch runner's),
whose FLOP counts dlbench/analysis/flops.py gives every framework's cells. About a minute a framework
(TensorFlow allocates VGG-16's 138 M parameters), hence slow."""

import pytest

from dlbench.models import CATALOGUE
from dlbench.runners import capabilities, framework_names
from tests.conftest import framework_python
from tests.frameworks import model_counts

REFERENCE = {
    "resnet50": {"params": 25_557_032, "flops": 8_178_368_512},  # ResNet v1.5
    "resnet152": {"params": 60_192_808, "flops": 23_027_253_248},
    "vgg16": {"params": 138_357_544, "flops": 30_940_528_640},
    "inception_v3": {"params": 23_834_568, "flops": 5_675_842_240},  # without the auxiliary head
    "alexnet": {"params": 61_100_840, "flops": 1_428_376_960},
    "bert_base": {"params": 110_106_428},  # MLM decoder tied to the word embeddings
}
# (framework, model): {count: difference from the reference}
KNOWN_DIFFERENCES = {
    # Gluon's BottleneckV1 gives its two 1x1 body convs a bias (before batch norm: no effect
    # on what trains, and no multiply-adds).
    ("mxnet", "resnet50"): {"params": 18_880},
    ("mxnet", "resnet152"): {"params": 59_840},
    # Keras's InceptionV3 batch norm has no scale (gamma), which the TF runner keeps.
    ("tensorflow", "inception_v3"): {"params": -17_216},
}


@pytest.mark.slow
@pytest.mark.parametrize("framework", framework_names())
def test_every_model_has_the_reference_parameters_and_flops(framework):
    if framework not in model_counts.SCRIPTS:
        pytest.skip(f"{framework}: no counting script in tests/frameworks/model_counts.py yet")
    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    # The LLMs' counts: tests/frameworks/test_llm.py (on the meta device; an 8B would not fit here).
    models = [m for m in capabilities(framework).models if CATALOGUE[m]["kind"] != "llm"]
    counts = model_counts.count(framework, models)
    expected = {}
    for model in models:
        differences = KNOWN_DIFFERENCES.get((framework, model), {})
        expected[model] = {key: n + differences.get(key, 0) for key, n in REFERENCE[model].items()}
    assert counts == expected


def test_known_differences_name_models_the_frameworks_build():
    for framework, model in KNOWN_DIFFERENCES:
        assert model in capabilities(framework).models, (framework, model)
