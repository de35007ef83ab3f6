"""The generation workload: metrics from a fake decoder with a known cost per step, token agreement, and a
case through the runner whose tokens diverge at a known step."""

from __future__ import annotations

import gen_fakes
import numpy as np
import pytest

from harness.config import RunConfig
from harness.errors import ResultsError
from harness.execution import CaseRunner
from harness.workloads.generate.workload import timed_generations
from harness.workloads.generate.loop import greedy_generate
from harness.workloads.generate.metrics import summarize, token_agreement
from harness.measure.timer import TimingPolicy
from harness.options import parse_run_options
from harness.report.generation import generation_lines
from harness.report.render import render_html, render_markdown
from harness.report.tables import cases_frame
from harness.results.schema import CaseId, RunResults, results_from_doc
from harness.workloads import get_workload
from harness.results.stored import RunEnvironmentRecord


def test_metrics_come_out_of_a_known_cost_per_step():
    clock = gen_fakes.FakeClock()
    dec = gen_fakes.FakeDecoder(clock, prefill_ns=1000, step_ns=50_000, ctx_ns=100)
    prompt = np.zeros((2, 10), np.int64)
    runs = [greedy_generate(dec, prompt, 5, clock) for _ in range(3)]
    g = summarize(runs, batch=2, prompt_len=10)
    # prefill: 1000 ns x 20 prompt tokens; step i (0-based) sees 10 + i tokens in the cache
    steps = [50_000 + 100 * (10 + i) for i in range(4)]
    assert g.ttft_ns == [20_000] * 3 and g.decode_ns == [steps] * 3
    assert g.e2e_ns == [20_000 + sum(steps)] * 3
    assert g.ttft.p50_ms == pytest.approx(0.02)
    assert g.tpot.p50_ms == pytest.approx(np.percentile(steps * 3, 50) / 1e6)
    assert g.tpot.p99_ms == pytest.approx(np.percentile(steps * 3, 99) / 1e6) and g.tpot.n == 12
    assert g.tokens_per_s == pytest.approx(2 * 5 / ((20_000 + sum(steps)) / 1e9))
    assert g.decode_tokens_per_s == pytest.approx(2 * 4 / (sum(steps) / 1e9))
    assert g.context_p50_ms == [[11 + i, s / 1e6] for i, s in enumerate(steps)]
    assert sum(g.itl["counts"]) == 12 and g.new_tokens == 5


def test_timed_generations_run_at_least_three_and_until_the_minimum_time():
    clock = gen_fakes.FakeClock()
    dec = gen_fakes.FakeDecoder(clock, prefill_ns=0, step_ns=1_000_000, ctx_ns=0)  # 4 ms per generation
    assert len(timed_generations(dec, np.zeros((1, 4), np.int64), 5, 0.0, 100, clock)) == 3
    assert len(timed_generations(dec, np.zeros((1, 4), np.int64), 5, 0.03, 100, clock)) == 8  # 8 x 4 ms > 30 ms
    assert len(timed_generations(dec, np.zeros((1, 4), np.int64), 5, 10.0, 5, clock)) == 5  # capped


def test_first_divergence_and_match_rate():
    ref = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    got = np.array([[1, 2, 9, 9], [5, 6, 7, 8]])
    a = token_agreement(got, ref)
    assert a.first_divergence == 2 and a.first_divergence_per_sequence == [2, None]
    assert a.exact_match_rate == 0.75 and a.sequences_identical == 1
    assert token_agreement(ref, ref).first_divergence is None


@pytest.fixture
def config(tmp_path):
    return RunConfig.build(models=("fake-lm",), runtimes=("fake-gen", "fake-gen-diverges"), repeats=1,
                     workload="generate", batch_sizes=(2,), prompt_lens=(6,), output_lens=(12,),
                     timing=TimingPolicy(min_time_s=0.0, min_iters=3, warmup_iters=1),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")


def test_a_runtime_diverging_at_a_known_step_reports_it_and_results_round_trip(config):
    cases = get_workload(config.workload).cases(config)
    assert [c.id for c in cases] == ["fake-lm-fake-gen-fp32-b2-s6-g12", "fake-lm-fake-gen-diverges-fp32-b2-s6-g12"]
    runner = CaseRunner()
    ref, div = (runner.run(c, config) for c in cases)
    assert ref.status == "passed", ref.reason
    assert ref.is_reference and ref.generation.conformance.first_divergence is None
    assert ref.generation.conformance.exact_match_rate == 1.0 and len(ref.samples_ns) == 3
    conf = div.generation.conformance
    assert conf.first_divergence == 5 and conf.first_divergence_per_sequence == [5, 5]
    assert conf.exact_match_rate == pytest.approx(5 / 12)
    assert div.status == "passed"  # the first step's logits agree: drift is judged there
    run = RunResults("r", "now", RunEnvironmentRecord(), config.as_dict(), [ref, div], complete=True)
    back = results_from_doc(__import__("json").loads(run.to_json()))
    assert back.cases[1].case == cases[1] and back.cases[1].generation.conformance.first_divergence == 5
    doc = __import__("json").loads(run.to_json())
    doc["cases"][1]["generation"]["decode_ns"][0][2] += 1
    with pytest.raises(ResultsError, match=r"cases\[1\]\.generation\.e2e_ns\[0\]: .* disagree"):
        results_from_doc(doc, "results.json")
    df = cases_frame(back)
    assert list(df["first_divergence"].astype("object").where(df["first_divergence"].notna(), None)) == [None, 5]
    md = render_markdown(back)
    assert "### Generation" in md and "first divergence" in md
    assert any("first divergence at token 5" in line for line in generation_lines(back))
    html = render_html(back)
    assert "Generation" in html and "decode latency vs context" in html


def test_a_later_block_of_a_generation_case_is_refused_with_the_reason(config):
    from harness.errors import HarnessError

    with pytest.raises(HarnessError, match="measured in one block"):
        CaseRunner().measure_block(get_workload(config.workload).cases(config)[0], config)


def test_a_runtime_that_cannot_generate_is_a_skip_with_the_reason(config):
    r = CaseRunner().run(CaseId("fake-lm", "fake-no-gen", "fp32", 2, 6, "cpu", 12), config)
    assert r.status == "skipped" and "cannot run the generation workload" in r.reason


def test_options_make_a_generation_matrix():
    cfg = parse_run_options({"workload": "generate", "models": "fake-lm", "runtimes": "fake-gen",
                             "batch_sizes": "1,4", "prompt_lens": "128", "output_lens": "64"})
    assert [c.id for c in get_workload(cfg.workload).cases(cfg)] == ["fake-lm-fake-gen-fp32-b1-s128-g64", "fake-lm-fake-gen-fp32-b4-s128-g64"]


def test_output_lengths_past_the_models_context_are_refused_before_anything_runs(config):
    """--output-lens 1000000 on a 4,096-token model ran until the case timeout: now the case's row says why,
    with no decoder built."""
    from harness.model import get_model
    from harness.plugins import load_plugins

    load_plugins()
    assert get_model("deepseek-tiny").context_length == 4096 and get_model("mlp").context_length is None
    r = CaseRunner().run(CaseId("deepseek-tiny", "ort-cpu", "fp32", 1, 32, "cpu", 1_000_000), config)
    assert r.status == "error" and r.phase == "load" and r.samples_ns == []
    assert r.reason == ("prompt 32 + 1000000 new tokens = 1000032 positions exceed deepseek-tiny's context of "
                        "4096 (its config's max_position_embeddings): lower --prompt-lens or --output-lens")
