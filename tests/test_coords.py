import pytest

from dlbench.coords import Scale
from tests.conftest import make_coords


def test_scale_parse_and_labels():
    s = Scale.parse("2x4")
    assert (s.nodes, s.devices_per_node, s.devices) == (2, 4, 8)
    assert s.caict_label == "2n8c"
    for bad in ["2n8c", "0x1", "1x", "1x4;rm"]:
        with pytest.raises(ValueError):
            Scale.parse(bad)


def test_run_dir_is_readable_and_cell_drops_repeat():
    c = make_coords(scale="1x2", strategy="ddp", repeat=3)
    assert c.run_dir == "results/runs/pytorch/resnet50/fp32/synthetic/bs8/1x2/ddp/rep3"
    assert c.cell == make_coords(scale="1x2", strategy="ddp", repeat=1).cell


@pytest.mark.parametrize("field,value", [("model", "resnet50; rm -rf /"), ("batch", "-1"), ("scale", "1x$(id)")])
def test_coordinates_reject_unsafe_values(field, value):
    with pytest.raises(ValueError, match=field):
        make_coords(**{field: value})
