"""Workload-owned option groups: an option of another workload is a usage error, never ignored; what option parsing
needs of a workload comes from the workload (its hooks), not from a branch on its name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.model import get_model
from harness.options import OPTIONS, RUN_GROUPS, WORKLOAD_GROUPS, owners, parse_run_options
from harness.workloads import get_workload, workload_names

PKG = Path(__file__).resolve().parents[2] / "harness"


def raw(tmp_path, **kw):
    base = {o.dest: None for o in OPTIONS}
    base.update(out=str(tmp_path / "o"), **kw)
    return base


@pytest.mark.parametrize("workload, option, value, owner", [
    ("generate", "variants", "opt=basic", "forward"),  # the two examples
    ("conform", "profile", True, "forward"),
    ("conform", "settle", "1", "forward"),
    ("generate", "localize", True, "forward"),
    ("generate", "scenarios", "offline", "forward"),
    ("ab", "variants", "opt=basic", "forward"),  # ab's sides are its variants; --variants was ignored
    ("forward", "prompt_lens", "16", "generate"),
    ("generate", "ops", "Conv", "conform"),
    ("forward", "match", ["Conv"], "conform"),
    ("forward", "ab_pairs", "10", "ab or gate"),
])
def test_an_option_of_another_workload_is_a_usage_error(tmp_path, workload, option, value, owner):
    with pytest.raises(UsageError) as info:
        parse_run_options(raw(tmp_path, workload=workload, **{option: value}))
    name = option.replace("_", "-")
    assert str(info.value) == f"--{name} is an option of --workload {owner}; --workload {workload} does not take it"


@pytest.mark.parametrize("argv, message", [
    (["--workload", "generate", "--variants", "opt=basic"],
     "--variants is an option of --workload forward; --workload generate does not take it"),
    (["--workload", "conform", "--profile"],
     "--profile is an option of --workload forward; --workload conform does not take it"),
    (["--confirm", "3"], "--confirm re-measures the cases --baseline judged regressed; without --baseline"),
    (["--workload", "generate", "--repeats", "3"],
     "--repeats measures each case in several blocks; --workload generate measures a case in one"),
])
def test_harness_run_refuses_it_with_exit_2_and_one_line(tmp_path, capsys, argv, message):
    from harness.cli import main

    assert main(["run", *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "o").exists()  # refused before anything ran


def test_each_workload_takes_its_own_options_and_the_shared_ones(tmp_path):
    fwd = parse_run_options(raw(tmp_path, models="mlp", runtimes="torch-cpu", variants="base,opt=basic",
                                profile=True, localize=True, settle="1", scenarios="offline", threads="1"))
    assert fwd.workload == "forward" and fwd.matrix.variants == (None, "opt=basic") and fwd.measure.profile
    assert fwd.accuracy.localize and fwd.measure.settle_s == 1 and fwd.loadgen.scenarios == ("offline",)
    gen = parse_run_options(raw(tmp_path, workload="generate", runtimes="torch-cpu", prompt_lens="16",
                                output_lens="4", threads="1", seed="3"))
    assert gen.generation.prompt_lens == (16,) and gen.generation.output_lens == (4,) and gen.inputs.seed == 3
    # generate's default models: the zoo's causal LMs
    assert gen.matrix.models and all("decoder" in get_model(m).tags for m in gen.matrix.models)
    conf = parse_run_options(raw(tmp_path, workload="conform", ops="Conv", opset="13:17", no_light=True,
                                 match=["conv*"], threads="1"))
    assert conf.conformance.ops == ("Conv",) and (conf.conformance.opset_min, conf.conformance.opset_max) == (13, 17)
    assert conf.conformance.light is False and conf.conformance.keywords == ("conv*",)
    assert conf.matrix.models == () and conf.matrix.runtimes == ()  # conform's defaults: its cases, its runtimes
    ab = parse_run_options(raw(tmp_path, workload="ab", models="mlp", runtimes="ort-cpu", ab_b="opt=basic",
                               ab_pairs="10"))
    assert ab.ab.ab_b == "opt=basic" and ab.ab.ab_pairs == 10


def test_a_command_that_fixes_its_workload_composes_what_it_takes(tmp_path):
    """gate-check measures forward cases and composes the A/B options for `--ab`: not refused there (no
    --workload to choose, its groups are what it takes)."""
    from harness.commands.gating import GATE_CHECK_GROUPS

    c = parse_run_options(raw(tmp_path, ab_pairs="12", variants="opt=basic"), GATE_CHECK_GROUPS)
    assert c.workload == "forward" and c.ab.ab_pairs == 12 and c.matrix.variants == ("opt=basic",)


def test_feeds_fill_the_sequence_axis_the_workload_names():
    assert get_workload("forward").sequence_field == "seq_lens"
    assert get_workload("generate").sequence_field == "prompt_lens"
    assert {get_workload(n).sequence_field for n in workload_names()} <= {o.field for o in OPTIONS}


def test_every_owned_group_exists_and_every_workload_group_is_owned():
    declared = {g for n in workload_names() for g in get_workload(n).option_groups}
    assert declared == {g.name for g in WORKLOAD_GROUPS}
    assert all(owners(g.name) for g in WORKLOAD_GROUPS)
    assert not [g.name for g in RUN_GROUPS if g not in WORKLOAD_GROUPS and owners(g.name)]


def test_options_parsing_never_branches_on_a_workload_name():
    bad = [f"{p.relative_to(PKG.parent)}:{n}: {line.strip()}" for p in sorted((PKG / "options").rglob("*.py"))
           for n, line in enumerate(p.read_text().splitlines(), 1)
           if re.search(r"workload\s*[!=]=\s*['\"]|['\"]\s*[!=]=\s*workload\b", line)]
    assert not bad, "\n".join(bad)


def _source(workload: str) -> str:
    return "\n".join(p.read_text() for p in sorted((PKG / "workloads" / workload).rglob("*.py")))


@pytest.mark.parametrize("group", WORKLOAD_GROUPS, ids=lambda g: g.name)
def test_a_group_is_owned_by_the_workloads_that_read_its_fields(group):
    """Ownership is what the code does: each field of the group is read by an owner's package, and by no other
    workload's (were one to read it, the group must name it as an owner, or the option would be refused there)."""
    fields = [f for o in group.options for f in ((o.field,) if o.field else o.fields)]
    own = owners(group.name)
    reads = {name: {f for f in fields if re.search(rf"\.{re.escape(f)}\b", _source(name))}
             for name in workload_names()}
    assert set(fields) == set().union(*(reads[n] for n in own)), (group.name, own)
    assert not {n: sorted(r) for n, r in reads.items() if r and n not in own}, group.name


def test_a_workload_owns_its_defaults_below_the_commands_and_the_users(tmp_path):
    """conform runs one thread and 60 s per case through `harness run --workload conform` as through `harness
    conform`; a value the user gives wins, and other workloads keep the configuration's defaults."""
    from harness.commands.conform import CONFORM_GROUPS
    from harness.config import ProcessConfig

    run = parse_run_options(raw(tmp_path, workload="conform"))
    command = parse_run_options(raw(tmp_path), CONFORM_GROUPS, workload="conform")
    assert (run.measure.threads, run.process.case_timeout_s) == (command.measure.threads,
                                                                 command.process.case_timeout_s) == (1, 60.0)
    given = parse_run_options(raw(tmp_path, workload="conform", threads="2", case_timeout="5"))
    assert (given.measure.threads, given.process.case_timeout_s) == (2, 5.0)
    fwd = parse_run_options(raw(tmp_path, models="mlp", runtimes="torch-cpu"))
    assert fwd.process.case_timeout_s == ProcessConfig.case_timeout_s


@pytest.mark.parametrize("name", workload_names())
def test_a_workload_says_whether_it_measures_in_blocks_as_its_worker_state_does(name):
    """--repeats is refused at parse time by the declaration; the declaration must match the worker state. A
    workload that drives its own requests (ab's pairs: Workload.execute) measures blocks for its driver only,
    never the session's --repeats rounds: it declares none."""
    from harness.measure.timer import Timer
    from harness.workloads.base import WorkerState, Workload

    w = get_workload(name)
    state = w.worker_state(Timer(), defer_blocks=False)
    if type(w).execute is not Workload.execute:
        assert not w.measures_in_blocks
        return
    assert w.measures_in_blocks == (type(state).measure_block is not WorkerState.measure_block)
