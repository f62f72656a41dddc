"""A framework's own knobs are declared with its plug-in (Capabilities.options), set under
framework_options.<framework>, checked at planning time and carried to the ranks."""

import copy

import pytest
import yaml

from dlbench.coords import RunCoords
from dlbench.launch.request import LaunchRequest
from dlbench.planning.config import checked_grid
from dlbench.planning.grid import ConfigError
from dlbench.protocol import RunProtocol
from dlbench.runners import capabilities
from dlbench.runners.base import RunSpec
from tests.conftest import REPO

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def with_options(options: dict) -> dict:
    config = copy.deepcopy(DEFAULT)
    config["framework_options"] = options
    return config


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mxnet": {"sync": "sometimes"}}, "framework_options.mxnet.sync: 'sometimes' is not one of waitall, loss"),
        (
            {"tensorflow": {"inter_op_threads": "2"}},
            "framework_options.tensorflow.inter_op_threads: '2': expected a value of type int",
        ),
        ({"pytorch": {"dali": 1}}, "framework_options.pytorch.dali: 1: expected a value of type bool"),
        ({"pytorch": {"fast": True}}, "framework_options.pytorch.fast: unknown option; declared: dali"),
        ({"caffe": {}}, "framework_options.caffe: unknown framework"),
    ],
)
def test_a_bad_option_is_one_error_naming_the_key(options, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        checked_grid(with_options(options))


def test_options_travel_in_the_launch_request_and_fill_in_their_defaults():
    checked_grid(with_options({"mxnet": {"sync": "loss"}}))
    mxnet = capabilities("mxnet")
    assert mxnet.options_text({"sync": "loss"}) == "sync=loss"
    coords = RunCoords("mxnet", "resnet50", "fp32", "synthetic", "8", "1x1", "single", 1)
    request = LaunchRequest(coords, RunProtocol("caict2020", 1, 2, "mean"), "/r", options="sync=loss")
    assert LaunchRequest.from_argv(request.to_argv()).options == "sync=loss"
    spec = RunSpec(coords, 8, 224, 0, 1, "cpu", options=mxnet.parse_options(request.options))
    assert spec.options == {"sync": "loss"}
    assert RunSpec(coords, 8, 224, 0, 1, "cpu").options == {"sync": "waitall"}  # the declared default
    with pytest.raises(ValueError, match="image_size 0 for resnet50: give the size it trains at"):
        RunSpec(coords, 8, 0, 0, 1, "cpu")  # sizes are resolved at planning, never here
    tf = capabilities("tensorflow")
    assert tf.parse_options("") == {"inter_op_threads": 0}
    assert capabilities("pytorch").parse_options("dali=false") == {"dali": False, "fp8_emulation": False}
    with pytest.raises(ValueError, match="unknown option"):
        tf.parse_options("sync=loss")
