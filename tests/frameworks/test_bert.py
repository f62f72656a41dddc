"""Every framework's BERT (issue #21): the masked-LM loss normalised as the reference scripts
do, and a tiny BERT that trains (docs/frameworks/equivalence.md). Each in the framework's own
environment, through the runner's code."""

import pytest

from dlbench.runners import capabilities, framework_names
from tests.conftest import framework_python
from tests.frameworks import bert_tiny

FRAMEWORKS = [f for f in framework_names() if "bert_base" in capabilities(f).models]


def needs(framework: str):
    if not framework_python(framework).exists():
        pytest.skip(f"the {framework} environment is not built")
    return framework_python(framework)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bert_loss_is_the_reference_normalisation(framework):
    """sum(weight x masked-LM loss) / (sum(weight) + 1e-5) over the device's batch + mean
    next-sentence loss, on a hand-made case whose sequences have unequal slot counts (a mean
    per sequence, TensorFlow's and MXNet's before, gives another number)."""
    if framework not in bert_tiny.LOSS_SCRIPTS:
        pytest.fail(f"{framework} builds BERT: add its loss script to tests/frameworks/bert_tiny.py")
    loss = bert_tiny.framework_loss(needs(framework), framework)
    assert loss == pytest.approx(bert_tiny.reference_loss(), rel=1e-5)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bert_trains(tmp_path, framework):
    """The runner's BERT at tiny sizes on a fixed batch of real (padded) examples: the loss
    starts near ln(vocab) + ln(2) and falls at every step."""
    python = needs(framework)
    values = bert_tiny.train(python, framework, bert_tiny.write_examples(tmp_path / "bert"))["losses"]
    assert abs(values[0] - bert_tiny.INITIAL_LOSS) < 0.5, values
    assert all(b < a for a, b in zip(values, values[1:], strict=False)), values
