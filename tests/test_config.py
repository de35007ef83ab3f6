"""RunConfig (typed, with defaults) and option parsing: the same options and validation for `harness run` and
plain pytest."""

from __future__ import annotations

import itertools

import pytest

from harness.config import RunConfig
from harness.options import OPTIONS, parse_run_options
from harness.errors import UsageError
from harness.precision import Precision
from harness.workloads import get_workload


def raw(**kw):
    base = {o.dest: None for o in OPTIONS}
    base.update(kw)
    return base


def test_quick_defaults():
    c = parse_run_options(raw(quick=True))
    assert c.matrix.models == ("mlp", "resnet18")
    assert c.matrix.runtimes == ("torch-cpu", "ort-cpu")
    assert c.matrix.precisions == (Precision.FP32,)
    assert c.matrix.batch_sizes == (1, 4)
    assert c.measure.timing.min_time_s == 0.5 and c.measure.timing.min_iters == 10
    assert c.process.isolation is True


def test_explicit_values_override_quick():
    c = parse_run_options(raw(quick=True, models="mlp", batch_sizes="2, 16", min_time="0.1",
                                   min_iters="3", threads="1", seed="9", no_isolation=True))
    assert c.matrix.models == ("mlp",) and c.matrix.batch_sizes == (2, 16)
    assert c.measure.timing.min_time_s == 0.1 and c.measure.timing.min_iters == 3
    assert c.measure.threads == 1 and c.inputs.seed == 9 and c.process.isolation is False


@pytest.mark.parametrize("kw, message", [
    ({"models": "mlp,nope"}, "unknown model 'nope'; valid models: "),
    ({"runtimes": "torch-gpu"}, "unknown runtime 'torch-gpu' (did you mean 'torch-cpu'"),
    ({"precisions": "fp8"}, "unknown precision 'fp8'; valid precisions: fp32, fp16, bf16, int8"),
    ({"batch_sizes": "1,0"}, "--batch-sizes: 0 is not a positive size"),
    ({"seq_lens": "-5"}, "--seq-lens: -5 is not a positive size"),
    ({"batch_sizes": "one"}, "--batch-sizes: 'one' is not an integer"),
    ({"min_time": "fast"}, "--min-time: 'fast' is not a number"),
    ({"threads": "0"}, "--threads: 0 is below the minimum 1"),
    ({"exporter": "magic"}, "valid exporters: dynamo, legacy"),
])
def test_bad_options_are_usage_errors_that_name_the_valid_values(kw, message):
    with pytest.raises(UsageError, match=None) as info:
        parse_run_options(raw(**kw))
    assert message in str(info.value)


def test_a_config_is_built_from_typed_values_with_defaults_on_the_type(tmp_path, monkeypatch):
    """Constructing a RunConfig reads no clock and no memory size, registers nothing and probes no runtime."""
    import psutil

    from harness import model_files

    def boom(*a, **k):
        raise AssertionError("a side effect while constructing a RunConfig")

    monkeypatch.setattr(psutil, "virtual_memory", boom)
    monkeypatch.setattr(model_files, "register_user_model", boom)
    monkeypatch.setattr("time.strftime", boom)
    c = RunConfig.build(models=("mlp",), runtimes=("ort-cpu",), out_dir=tmp_path)
    assert c.matrix.precisions == (Precision.FP32,) and c.matrix.batch_sizes == (1, 8) and c.matrix.seq_lens == (128,)
    assert c.measure.timing.min_iters == 20 and c.measure.repeats == 3 and c.gating.confirm == 2 and c.process.isolation
    assert c.artifacts.calibration_method == "minmax" and c.artifacts.int8_method == "auto" and c.gating.baseline is None and c.outputs.run_id == ""


def test_every_option_names_a_config_field_or_is_read_by_the_parser():
    """Adding a run option is one OptionDef in its group (field + parser) and one field of a RunConfig section."""
    from harness.config import section_of

    for o in OPTIONS:
        top = (o.field or "").split(".")[0]
        assert o.field is None or top in ("timing", "workload") or section_of(top), o.name
        assert all(section_of(f) for f in o.fields), o.name  # several fields from one value (--opset's bounds)
        assert (o.field is None and not o.fields) == (o.parse is None), o.name
    read_by_parser = {o.name for o in OPTIONS if o.field is None and not o.fields}
    assert read_by_parser == {"models", "model", "shape", "runtimes", "out", "baseline", "gate", "gate-config"}


def test_a_config_is_read_by_sections_and_built_by_field_names(tmp_path):
    c = RunConfig.build(models=("mlp",), threads=3, case_timeout_s=5.0, scenarios=("offline",), out_dir=tmp_path)
    assert c.matrix.models == ("mlp",) and c.measure.threads == 3 and c.process.case_timeout_s == 5.0
    assert c.loadgen.scenarios == ("offline",) and c.outputs.out_dir == tmp_path
    d = c.replace(threads=1, workload="generate")
    assert d.measure.threads == 1 and d.workload == "generate" and c.measure.threads == 3
    with pytest.raises(TypeError, match="no field 'thread'"):
        c.replace(thread=1)
    flat = c.as_dict()  # results.json keeps one flat object
    assert flat["threads"] == 3 and flat["models"] == ["mlp"] or flat["models"] == ("mlp",)


def test_parsed_defaults_come_from_the_machine_and_the_clock(tmp_path):
    c = parse_run_options(raw(models="mlp", runtimes="ort-cpu"))
    assert c.outputs.run_id and c.outputs.out_dir.name == c.outputs.run_id and c.process.case_memory_gb > 0


def test_cases_are_the_cartesian_product_with_seq_only_for_text_models(fakes, tmp_path):
    c = RunConfig.build(models=("fake-linear", "mlp"), runtimes=("fake-ok", "ort-cpu"),
                  precisions=(Precision.FP32, Precision.FP16), batch_sizes=(1, 8), seq_lens=(32, 128),
                  out_dir=tmp_path)
    cases = get_workload(c.workload).cases(c)
    assert len(cases) == 2 * 2 * 2 * 2  # models x runtimes x precisions x batches; no seq axis here
    assert all(case.seq is None for case in cases)
    # cases sharing an activation are adjacent
    keys = [case.activation_key for case in cases]
    runs = [k for k, _ in itertools.groupby(keys)]
    assert len(runs) == len(set(runs)) == 2 * 2 * 2  # each activation key forms one contiguous run


def test_harness_run_hands_its_parsed_config_to_pytest_in_process(tmp_path, monkeypatch):
    """`harness run` parses its options once and passes the RunConfig object to the plugin: pytest gets the
    suites and the extra pytest arguments, no `--harness-*` strings."""
    import pytest

    from harness import cli

    seen = {}

    def fake_main(argv, plugins):
        seen["argv"], seen["plugins"] = argv, plugins
        return pytest.ExitCode.OK

    monkeypatch.setattr(pytest, "main", fake_main)
    assert cli.main(["run", "--models", "mlp", "--runtimes", "ort-cpu", "--batch-sizes", "1,2", "--quick",
                     "--no-isolation", "--case-timeout", "30", "--out", str(tmp_path), "--", "-x", "-k", "b1"]) == 0
    assert not any(a.startswith("--harness-") for a in seen["argv"]) and seen["argv"][-3:] == ["-x", "-k", "b1"]
    (carrier,) = seen["plugins"]
    config = carrier.run_config
    assert isinstance(config, RunConfig) and config.matrix.models == ("mlp",) and config.matrix.runtimes == ("ort-cpu",)
    assert config.matrix.batch_sizes == (1, 2) and config.matrix.quick and not config.process.isolation
    assert config.process.case_timeout_s == 30 and config.outputs.out_dir == tmp_path


def test_every_option_is_documented_in_the_options_page():
    """docs/options.md is generated from OPTIONS (tests/report/test_options_doc.py keeps it fresh); the README
    links to it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "options.md").read_text()
    for o in OPTIONS:
        assert f"`--{o.name}`" in page and f"`--harness-{o.name}`" in page, f"docs/options.md lacks --{o.name}"
    assert "docs/options.md" in (root / "README.md").read_text()


def test_precision_options_parse_and_reach_the_config():
    c = parse_run_options(raw(models="mlp", tolerance="fp16.max_rel_l2=0.05,int8.min_cosine=0.98",
                                   int8_method="Dynamic", calibration_method="entropy", localize=True))
    assert c.artifacts.int8_method == "dynamic" and c.artifacts.calibration_method == "entropy" and c.accuracy.localize is True
    assert c.accuracy.tolerance_override(Precision.FP16).max_rel_l2 == 0.05
    assert c.accuracy.tolerance_override("int8").min_cosine == 0.98 and c.accuracy.tolerance_override("fp32") is None
    assert c.as_dict()["tolerance_overrides"] == {"fp16": {"max_rel_l2": 0.05}, "int8": {"min_cosine": 0.98}}
    d = parse_run_options(raw(models="mlp"))
    assert d.artifacts.int8_method == "auto" and d.artifacts.calibration_method == "minmax" and not d.accuracy.localize
    assert d.accuracy.tolerance_override("fp16") is None


@pytest.mark.parametrize("kw, message", [
    ({"tolerance": "fp16.max_rell2=0.05"}, "--tolerance: 'fp16.max_rell2=0.05': unknown bound 'max_rell2'"),
    ({"tolerance": "fp9.atol=1"}, "--tolerance: unknown precision 'fp9'"),
    ({"int8_method": "qat"}, "--int8-method 'qat': valid methods: auto, static, dynamic"),
    ({"calibration_method": "mse"}, "--calibration-method 'mse': valid methods: minmax, entropy, percentile"),
])
def test_precision_options_reject_bad_values(kw, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_run_options(raw(models="mlp", **kw))


def test_fp16_on_torch_cpu_is_a_bf16_case_once(tmp_path):
    c = RunConfig.build(models=("mlp",), runtimes=("torch-cpu", "ort-cpu"), precisions=tuple(Precision), batch_sizes=(1,),
                  out_dir=tmp_path)
    got = [(x.runtime, x.precision) for x in get_workload(c.workload).cases(c)]
    assert all(isinstance(x.precision, Precision) for x in get_workload(c.workload).cases(c))
    assert got == [("torch-cpu", "fp32"), ("torch-cpu", "bf16"), ("torch-cpu", "int8"),
                   ("ort-cpu", "fp32"), ("ort-cpu", "fp16"), ("ort-cpu", "bf16"), ("ort-cpu", "int8")]


def _numeric_options():
    """Every option whose parser takes a number (the number parsers carry their bounds)."""
    from harness.options import OPTIONS

    return [o for o in OPTIONS if getattr(o.parse, "bounds", None) is not None]


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e999", "Infinity", "1e400"])
def test_every_numeric_option_refuses_infinities_as_it_refuses_nan(text):
    options = _numeric_options()
    assert len(options) >= 10  # min-time, case-timeout, settle, ab-pairs, ...
    for o in options:
        with pytest.raises(UsageError, match=f"^--{o.name}: ") as info:
            o.parse(text, o.name)
        assert "is not a finite number" in str(info.value) or "is not an integer" in str(info.value) or \
            "not a fraction" in str(info.value), (o.name, str(info.value))


@pytest.mark.parametrize("kw, message", [
    ({"ab_pairs": "1000000000"}, "--ab-pairs: 1000000000 is above the maximum 10000 (each pair is two blocks"),
    ({"ab_pairs": "1e9"}, "--ab-pairs: '1e9' is not an integer"),
    ({"ab_pairs": "10001"}, "above the maximum 10000"),
    ({"ab_block_time": "inf"}, "--ab-block-time: 'inf' is not a finite number"),
    ({"ab_block_time": "61"}, "--ab-block-time: 61 is above the maximum 60"),
    ({"settle": "600"}, "--settle 600 s is not shorter than --case-timeout 600 s"),
    ({"settle": "30", "case_timeout": "10"}, "--settle 30 s is not shorter than --case-timeout 10 s"),
    ({"settle": "10", "case_timeout": "10"}, "--settle 10 s is not shorter than --case-timeout 10 s"),
    ({"batch_sizes": "1,2000000000"}, "--batch-sizes: 2000000000 is above the maximum 1048576"),
    ({"seq_lens": "99999999"}, "--seq-lens: 99999999 is above the maximum 1048576"),
    ({"threads": "100000"}, "--threads: 100000 is above the maximum 4096"),
])
def test_absurd_sizes_are_refused_naming_the_option(kw, message, tmp_path):
    from harness.commands.ab import AB_GROUPS
    from harness.options import RUN_GROUPS

    groups = AB_GROUPS if "ab_pairs" in kw or "ab_block_time" in kw else RUN_GROUPS
    with pytest.raises(UsageError) as info:
        parse_run_options(raw(out=str(tmp_path / "o"), **kw), groups)
    assert message in str(info.value)


def test_settle_within_the_case_timeout_is_taken(tmp_path):
    c = parse_run_options(raw(settle="30", case_timeout="60", out=str(tmp_path / "o")))
    assert c.measure.settle_s == 30 and c.process.case_timeout_s == 60


def test_the_ab_header_never_promises_more_activations_than_pairs():
    """`--ab-activations 50 --ab-pairs 2` was clamped silently under a header promising 50."""
    from harness.config import AbConfig

    assert AbConfig(ab_pairs=40, ab_activations=4).activations_text() == "4 activation(s) per side"
    few = AbConfig(ab_pairs=2, ab_activations=50)
    assert few.activations_used == 2
    assert few.activations_text() == ("2 activation(s) per side (--ab-activations 50 lowered to 2: an activation "
                                      "needs a pair of its own, and --ab-pairs is 2)")


def test_a_slowdown_no_pairs_can_detect_is_refused_before_anything_is_measured():
    import pytest

    from harness.errors import UsageError
    from harness.options.values import detectable

    assert detectable("5%", "ab-detect") == 0.05 and detectable("0.001", "ab-detect") == 0.001
    with pytest.raises(UsageError, match="below 0.1%"):
        detectable("0.0001", "ab-detect")
