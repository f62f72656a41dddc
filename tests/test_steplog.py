import dataclasses
import json
import os

import jsonschema
import pytest
import yaml

from dlbench.schemas import load_schema, schema_path
from dlbench.steplog import SCHEMA, Header, StepLogWriter, read_header, read_steplog
from tests.conftest import make_coords, write_run


def test_roundtrip_and_read_only(tmp_path):
    run_dir = write_run(tmp_path, make_coords(), [0.5, 0.5, 0.2, 0.2, 0.2])
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert log.valid, log.problems
    assert log.header["schema"] == SCHEMA
    assert [s["phase"] for s in log.steps] == ["warmup"] * 2 + ["measure"] * 3
    assert log.status == "ok"
    assert not os.access(run_dir / "rank0.steps.jsonl", os.W_OK) or os.geteuid() == 0
    assert (os.stat(run_dir / "rank0.steps.jsonl").st_mode & 0o222) == 0


def test_writer_refuses_to_overwrite(tmp_path):
    run_dir = write_run(tmp_path, make_coords(), [0.1, 0.1, 0.1])
    with pytest.raises(FileExistsError):
        StepLogWriter(run_dir / "rank0.steps.jsonl", {})


def test_records_match_the_published_json_schema(tmp_path):
    schema = load_schema("steplog")
    run_dir = write_run(tmp_path, make_coords(), [0.1, 0.1, 0.1])
    for line in (run_dir / "rank0.steps.jsonl").read_text().splitlines():
        jsonschema.validate(json.loads(line), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"type": "footer", "status": "exploded"}, schema)


def _corrupt(tmp_path, transform):
    run_dir = write_run(tmp_path, make_coords(), [0.1, 0.1, 0.1, 0.1])
    path = run_dir / "rank0.steps.jsonl"
    os.chmod(path, 0o644)
    path.write_text(transform(path.read_text()))
    return read_steplog(path)


def test_truncated_last_line_is_reported(tmp_path):
    log = _corrupt(tmp_path, lambda t: t[: t.rindex('{"type":"footer"') + 20])
    assert not log.valid
    assert any("truncated last line" in p for p in log.problems)


def test_invalid_json_in_the_middle(tmp_path):
    log = _corrupt(tmp_path, lambda t: t.replace('"phase":"measure"', '"phase":measure', 1))
    assert any("invalid JSON on line" in p for p in log.problems)


def test_missing_footer_means_killed(tmp_path):
    log = _corrupt(tmp_path, lambda t: "".join(t.splitlines(keepends=True)[:-1]))
    assert log.status == "killed"
    assert any("missing footer" in p for p in log.problems)


def test_unknown_schema_version(tmp_path):
    log = _corrupt(tmp_path, lambda t: t.replace(SCHEMA, "dlbench.steplog/99"))
    assert any("unknown schema version" in p for p in log.problems)


def test_duplicate_step_indices(tmp_path):
    log = _corrupt(tmp_path, lambda t: t.replace('"i":3', '"i":2'))
    assert any("duplicate step index 2" in p for p in log.problems)


def test_schema_file_is_also_valid_yaml_loadable():
    # The README points at this file; keep it loadable by both json and yaml readers.
    assert yaml.safe_load(schema_path("steplog").read_text())["title"]


def test_header_type_covers_the_schema_and_writes_in_field_order(tmp_path):
    schema = load_schema("steplog")
    header_branch = next(b for b in schema["oneOf"] if b["properties"]["type"]["const"] == "header")
    names = [f.name for f in dataclasses.fields(Header)]
    assert set(header_branch["required"]) - {"type", "schema"} <= set(names)
    values = {name: f"{name}-value" for name in names} | {"run": make_coords().as_dict(), "rank": 0}
    values |= {"world_size": 1, "framework": {"name": "pytorch"}, "protocol": {}, "provenance": {}}
    values |= {"allocator": {"name": "system", "library": "/lib/libc.so.6"}}
    path = tmp_path / "rank0.steps.jsonl"
    writer = StepLogWriter(path, Header(**values))
    writer.close("ok")
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first) == ["type", "schema", *names]
    jsonschema.validate(first, schema)
    assert read_steplog(path).valid and read_header(path) == first


def test_header_breaking_the_schema_names_the_field(tmp_path):
    log = _corrupt(tmp_path, lambda t: t.replace('"rank":0', '"rank":-1', 1))
    assert log.header is None
    assert any(p.startswith("line 1: header field 'rank'") for p in log.problems), log.problems
    assert read_header(log.path) is None
    log = _corrupt(tmp_path / "b", lambda t: t.replace('"model":"resnet50",', "", 1))
    assert any("header field 'run'" in p and "model" in p for p in log.problems), log.problems


def test_footer_breaking_the_schema_names_the_field(tmp_path):
    log = _corrupt(tmp_path, lambda t: t.replace('"type":"footer"', '"type":"footer","steps_completed":-3'))
    assert not log.valid and log.footer is None
    assert any("footer field 'steps_completed'" in p for p in log.problems), log.problems
    log = _corrupt(tmp_path / "b", lambda t: t.replace('"status":"ok"', '"status":"exploded"'))
    assert "unknown footer status 'exploded'" in log.problems


def test_read_header_of_a_log_without_one(tmp_path):
    path = tmp_path / "rank0.steps.jsonl"
    path.write_text('{"type":"step"}\n')
    assert read_header(path) is None and read_header(tmp_path / "absent.jsonl") is None
