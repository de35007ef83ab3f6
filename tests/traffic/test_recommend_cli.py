"""`harness recommend` end to end on the fake runtime (real clock, in-process), its report, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.execution.supervisor import stop_forkserver
from harness.gating.verdicts import EXIT_CLEAN, EXIT_UNJUDGED, EXIT_USAGE
from harness.report.recommend import render_html, render_markdown


def _traffic(tmp_path: Path, text: str = "seed = 3\nrequests = 300\n[arrival]\nprocess = 'poisson'\nrate = 500\n"
             ) -> Path:
    p = tmp_path / "t.toml"
    p.write_text(text)
    return p


def test_recommend_on_the_fake_runtime_writes_json_markdown_and_html(tmp_path: Path, fakes, fake_env,
                                                                      capsys) -> None:
    stop_forkserver()  # the workers come from a forkserver that knows the fakes (fake_env)
    out = tmp_path / "rec"
    code = main(["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear",
                 "--runtimes", "fake-ok", "--batchers", "none;max=4,wait=1", "--slo-ms", "50",
                 "--requests", "200", "--max-requests", "400", "--probes", "5", "--search-tolerance", "0.3",
                 "--ab-pairs", "5", "--out", str(out)])
    assert code in (EXIT_CLEAN, EXIT_UNJUDGED)
    data = json.loads((out / "recommend.json").read_text())
    assert data["model"] == "fake-linear" and data["chosen"] in {c["name"] for c in data["candidates"]}
    assert data["isolation"] == "worker per configuration" and data["unjudged"] == []
    assert len(data["candidates"]) == 2 and data["ab"]["pairs"] == 5
    for c in data["candidates"]:
        cap = c["capacity"]
        assert cap["low"] <= cap["estimate"] <= cap["high"]
        assert cap["search_low"] or cap["low"] <= (cap["search_high"] or cap["high"]) <= cap["cliff"] * 1.0001
        assert cap["activations"] == 3 and len(cap["activation_cliffs"]) <= 2  # contended on every try: left out
        kinds = [p["kind"] for p in cap["probes"]]  # one saturation probe, or a pilot that sized a second
        assert kinds[0] == "saturation" and kinds[kinds.count("saturation")] == "floor"
        assert all(p["send_error_p99_ms"] is None or p["send_error_p99_ms"] >= 0 for p in cap["probes"])
    md = (out / "recommend.md").read_text()
    if code == EXIT_CLEAN:  # a star, and a deploy line, only on a recommendation the A/B confirmed
        assert "## Deployment recommendation: fake-linear" in md and "★" in md and "\n- deploy " in md
    else:
        assert "## Deployment search: could not judge" in md and "★" not in md and "deploy " not in md
    assert "<svg" in (out / "recommend.html").read_text()


@pytest.mark.parametrize("argv, words", [
    (["--slo-ms", "0"], "--slo-ms: 0.0 is below the minimum 1e-06"),
    (["--slo-ms", "5", "--percentile", "100"], "--percentile 100.0"),
    (["--slo-ms", "5", "--batchers", "max=4"], "--batchers 'max=4'"),
    (["--slo-ms", "5", "--threads", "two"], "--threads 'two'"),
    (["--slo-ms", "5", "--ab-pairs", "4"], "--ab-pairs: 4 is below the minimum 5"),
    # every number bounded as run bounds its own (#58): 0 / -1 / 5000 threads, NaN and negative caps, huge counts
    (["--slo-ms", "5", "--threads", "0"], "--threads: 0 is below the minimum 1"),
    (["--slo-ms", "5", "--threads", "1,-1"], "--threads: -1 is below the minimum 1"),
    (["--slo-ms", "5", "--threads", "5000"], "--threads: 5000 is above the maximum 4096"),
    (["--slo-ms", "5", "--memory-cap-mb", "nan"], "--memory-cap-mb: 'nan' is not a finite number"),
    (["--slo-ms", "5", "--memory-cap-mb", "-1"], "--memory-cap-mb: -1.0 is below the minimum"),
    (["--slo-ms", "5", "--drift-tolerance", "-0.5"], "--drift-tolerance: -0.5 is below the minimum 0"),
    (["--slo-ms", "5", "--ab-pairs", "1000000000"], "--ab-pairs: 1000000000 is above the maximum 10000"),
    (["--slo-ms", "5", "--requests", "1000000000000", "--max-requests", "1000000000000"],
     "--requests: 1000000000000 is above the maximum"),
    (["--slo-ms", "5", "--traffic-seed", "-1"], "--traffic-seed: -1 is below the minimum 0"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, fakes, capsys, argv: list[str], words: str) -> None:
    code = main(["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear",
                 "--runtimes", "fake-ok", "--out", str(tmp_path / "o"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_USAGE and words in err and "\n" not in err


def test_traffic_dimensions_the_model_lacks_are_refused(tmp_path: Path, fakes, capsys) -> None:
    t = _traffic(tmp_path, "[shapes.seq]\n16 = 1\n")
    code = main(["recommend", "--traffic", str(t), "--model", "fake-linear", "--runtimes", "fake-ok",
                 "--slo-ms", "5", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "dimension(s) seq are not inputs of model 'fake-linear'" in err and str(t) in err


def test_the_report_escapes_names_and_marks_the_pareto_set() -> None:
    data = {"model": "m", "traffic": "t", "method": "halving", "cost_s": 1.0, "pareto": ["<b>a</b>"],
            "chosen": "<b>a</b>", "runner_up": "b|c",
            "constraints": {"bound_ms": 5, "percentile": 99, "drift_tolerance": None, "memory_cap_mb": 100},
            "reasons": ["deploy <b>a</b>"],
            "candidates": [
                {"name": "<b>a</b>", "drift": 0.0, "memory_mb": 10, "rung": 1, "cost_s": 1, "refusal": None,
                 "capacity": {"estimate": 100.0, "low": 99.0, "high": 101.0, "knee": 60.0, "cliff": 150.0,
                              "floor_ms": 1.0, "status": "found", "rates_probed": 9}},
                {"name": "b|c", "drift": 0.0, "memory_mb": 20, "rung": 1, "cost_s": 1, "refusal": None,
                 "capacity": {"estimate": 80.0, "low": 79.0, "high": 81.0, "knee": 50.0, "cliff": 120.0,
                              "floor_ms": 2.0, "status": "found", "rates_probed": 9}},
                {"name": "d", "drift": 0.5, "memory_mb": 20, "rung": -1, "cost_s": 0, "refusal": "drift",
                 "capacity": None}]}
    html = render_html(data)
    assert "<b>a</b>" not in html and "&lt;b&gt;a&lt;/b&gt;" in html and html.count("<circle") == 2
    md = render_markdown(data)
    assert "b\\|c runner-up" in md and "| yes | 100 | [99, 101]" in md and "memory cap 100 MB" in md


def test_resume_takes_the_searches_of_the_run_in_out_and_refuses_another_run(tmp_path: Path, fakes, capsys) -> None:
    out = tmp_path / "rec"
    argv = ["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear", "--runtimes", "fake-ok",
            "--batchers", "none;max=4,wait=1", "--slo-ms", "50", "--requests", "200", "--max-requests", "400",
            "--probes", "5", "--search-tolerance", "0.3", "--ab-pairs", "5", "--grid", "--no-isolation",
            "--out", str(out)]
    assert main(argv) in (EXIT_CLEAN, EXIT_UNJUDGED)
    first = json.loads((out / "recommend.json").read_text())
    assert first["schema_version"] == 3 and first["resumed_searches"] == 0 and first["method"] == "grid"
    capsys.readouterr()
    assert main([*argv, "--resume"]) in (EXIT_CLEAN, EXIT_UNJUDGED)
    assert capsys.readouterr().out.count("(resumed:") == 4  # 2 in the grid, the 2 again side by side
    again = json.loads((out / "recommend.json").read_text())
    assert again["resumed_searches"] == 4
    assert "(4 searches taken from the stopped run it resumed)" in (out / "recommend.md").read_text()
    assert [c["capacity"] for c in again["candidates"]] == [c["capacity"] for c in first["candidates"]]
    for extra, words in ((["--slo-ms", "40"], "was measured with another constraints, settings"),
                         (["--probes", "6"], "was measured with another settings")):
        assert main([*argv, "--resume", *extra]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert words in err and str(out / "recommend.json") in err
    (out / "recommend.json").write_text('{"model": "fake-linear", "candidates": []}')
    assert main([*argv, "--resume"]) == EXIT_USAGE
    assert "is not a recommend.json of schema version 1 or 2 or 3" in capsys.readouterr().err
    (out / "recommend.json").write_text("{")
    assert main([*argv, "--resume"]) == EXIT_USAGE and "cannot be read" in capsys.readouterr().err
    # a stored file is re-validated, never believed (#58): a capacity of 1e308 or -5, candidates that are a string
    for mutate, words in ((lambda c: c.update(estimate=1e308, high=1e308), "capacity.estimate: 1e+308 is not a capacity"),
                          (lambda c: c.update(estimate=-5.0, low=-6.0), "capacity.estimate: -5.0 is not a capacity"),
                          (lambda c: c.update(high=1e12), "capacity.high: 1000000000000.0 is not the upper end"),
                          (lambda c: c.update(low=10.0, estimate=5.0), "does not hold the estimate")):
        doc = json.loads(json.dumps(again))
        mutate(doc["candidates"][0]["searches"][0]["capacity"])
        (out / "recommend.json").write_text(json.dumps(doc))
        assert main([*argv, "--resume"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert words in err and "candidates[0].searches[0]" in err and "\n" not in err.strip(), err
    (out / "recommend.json").write_text(json.dumps({**again, "candidates": "a string"}))
    assert main([*argv, "--resume"]) == EXIT_USAGE
    assert "candidates: a list of configurations" in capsys.readouterr().err


def test_resume_needs_a_run_to_go_on_with(tmp_path: Path, fakes, capsys) -> None:
    base = ["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear", "--runtimes", "fake-ok",
            "--slo-ms", "50", "--resume"]
    assert main(base) == EXIT_USAGE and "--resume needs --out DIR" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "none")]) == EXIT_USAGE
    assert f"{tmp_path / 'none' / 'recommend.json'} does not exist" in capsys.readouterr().err


def test_resume_refuses_a_run_of_another_machine_or_library_versions(tmp_path: Path, fakes, capsys) -> None:
    out = tmp_path / "rec"
    argv = ["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear", "--runtimes", "fake-ok",
            "--slo-ms", "50", "--requests", "200", "--max-requests", "400", "--probes", "4",
            "--search-tolerance", "0.3",
            "--ab-pairs", "5", "--grid", "--no-isolation", "--out", str(out)]
    main(argv)
    data = json.loads((out / "recommend.json").read_text())
    for key, value in (("machine", {"cpu_model": "another", "fingerprint": "0"}), ("libraries", {"numpy": "0.1"})):
        (out / "recommend.json").write_text(json.dumps({**data, key: value}))
        capsys.readouterr()
        assert main([*argv, "--resume"]) == EXIT_USAGE
        assert f"was measured with another {key}" in capsys.readouterr().err


def _recommend(tmp_path: Path, *extra: str, runtimes: str = "fake-ok") -> tuple[int, dict]:
    out = tmp_path / "rec"
    code = main(["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear", "--runtimes", runtimes,
                 "--slo-ms", "50", "--requests", "200", "--max-requests", "400", "--probes", "4",
                 "--search-tolerance", "0.3",
                 "--ab-pairs", "5", "--grid", "--out", str(out), *extra])
    return code, json.loads((out / "recommend.json").read_text())


def test_a_configuration_whose_worker_crashes_costs_that_configuration(tmp_path: Path, fakes, fake_env) -> None:
    stop_forkserver()
    code, data = _recommend(tmp_path, runtimes="fake-ok,fake-abort-run")  # fake-abort-run: SIGABRT on call 8
    crashed = next(c for c in data["candidates"] if c["name"].startswith("fake-abort-run"))
    assert "the worker died during a probe" in crashed["refusal"] and "SIGABRT" in crashed["refusal"]
    assert data["chosen"].startswith("fake-ok ") and code == EXIT_CLEAN  # nothing to confirm against: one left


def test_a_configuration_whose_worker_hangs_costs_that_configuration(tmp_path: Path, fakes, fake_env,
                                                                    monkeypatch) -> None:
    from harness.execution import capacity_worker as worker

    stop_forkserver()
    monkeypatch.setattr(worker, "OPEN_TIMEOUT_S", 3.0)  # fake-hang sleeps an hour in its first call (the set-up)
    code, data = _recommend(tmp_path, runtimes="fake-ok,fake-hang")
    hung = next(c for c in data["candidates"] if c["name"].startswith("fake-hang"))
    assert "the worker hung: no answer to set-up in 3 s" in hung["refusal"]
    assert data["chosen"].startswith("fake-ok ")



def test_a_loaded_machine_is_never_a_recommendation(tmp_path: Path, fakes, monkeypatch, capsys) -> None:
    from harness.workloads.capacity.live import LiveConfig

    monkeypatch.setenv("HARNESS_CONTENTION_LIMIT", "0.10")  # the shipped limit (the suite turns it off)
    monkeypatch.setattr(LiveConfig, "read_proc", staticmethod(fakes.loaded_proc(0.4)))
    code, data = _recommend(tmp_path, "--no-isolation", "--batchers", "none;max=4,wait=1")
    assert code == EXIT_UNJUDGED and len(data["unjudged"]) == 3 and data["unjudged"][2].startswith("the A/B: 10 of")
    assert "contended on every try, e.g. the saturation probe" in data["unjudged"][0]
    assert "waited 40%" in data["unjudged"][0] and not data["ab"]["confirmed"]
    assert data["reasons"][0].startswith("not judged, the machine was loaded: ")
    probes = data["candidates"][0]["capacity"]["probes"]
    assert [p["verdict"] for p in probes[:3]] == ["retried", "retried", "info"] and probes[2]["contended"]
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("recommend: could not judge, the machine was loaded (3)")
    assert "not judged, the machine was loaded" in (tmp_path / "rec" / "recommend.md").read_text()


def test_a_quiet_machine_judges_as_before(tmp_path: Path, fakes, monkeypatch) -> None:
    from harness.workloads.capacity.live import LiveConfig

    monkeypatch.setenv("HARNESS_CONTENTION_LIMIT", "0.10")
    monkeypatch.setattr(LiveConfig, "read_proc", staticmethod(fakes.loaded_proc(0.01)))
    code, data = _recommend(tmp_path, "--no-isolation")
    assert data["unjudged"] == [] and data["chosen"] and code == EXIT_CLEAN
    assert not any(p["verdict"] == "retried" for p in data["candidates"][0]["capacity"]["probes"])


def test_a_configuration_waiting_on_its_own_threads_is_not_a_loaded_machine(tmp_path: Path, fakes,
                                                                            monkeypatch) -> None:
    """Its threads waited 40%, but no other process used the CPUs (torch-cpu at two threads on two cores, at a
    low rate: its pool wakes from idle for every request): the configuration's own behaviour, judged as it is."""
    from harness.workloads.capacity.live import LiveConfig

    monkeypatch.setenv("HARNESS_CONTENTION_LIMIT", "0.10")
    monkeypatch.setattr(LiveConfig, "read_proc", staticmethod(fakes.loaded_proc(0.4, others=0.0)))
    code, data = _recommend(tmp_path, "--no-isolation")
    assert data["unjudged"] == [] and data["chosen"] and code == EXIT_CLEAN


def _no_decision(text: str) -> None:
    """Nothing in `text` reads as a decision: no "deploy" line, no star."""
    assert "★" not in text and "deploy " not in text.lower(), text


def test_an_unjudged_run_holds_no_deploy_line_and_no_star_anywhere(tmp_path: Path, fakes, monkeypatch,
                                                                    capsys) -> None:
    """The loaded machine (a fake /proc): the terminal, recommend.md, recommend.html and recommend.json carry the
    reason first and the best estimate as provisional, never "deploy" or a star."""
    from harness.workloads.capacity.live import LiveConfig

    monkeypatch.setenv("HARNESS_CONTENTION_LIMIT", "0.10")
    monkeypatch.setattr(LiveConfig, "read_proc", staticmethod(fakes.loaded_proc(0.4)))
    code, data = _recommend(tmp_path, "--no-isolation", "--batchers", "none;max=4,wait=1")
    out = capsys.readouterr().out
    assert code == EXIT_UNJUDGED and data["verdict"] == "not_judged" and data["not_judged"].startswith(
        "the machine was loaded: ")
    assert data["chosen"] and any(r.startswith("best estimate (provisional, not a recommendation): ")
                                  for r in data["reasons"])
    assert data["reasons"][0].startswith("not judged, the machine was loaded: ")
    last = out.rstrip().splitlines()[-1]
    assert "best estimate (provisional): " + data["chosen"] in last
    md = (tmp_path / "rec" / "recommend.md").read_text()
    html = (tmp_path / "rec" / "recommend.html").read_text()
    assert md.startswith("## Deployment search: could not judge (no recommendation): fake-linear")
    assert md.index("not judged, the machine was loaded") < md.index("best estimate (provisional")
    assert "(best estimate, provisional)" in md and "(best estimate, provisional)" in html
    for text in (out, md, html, json.dumps(data)):
        _no_decision(text)


def test_an_ab_that_cannot_tell_the_two_apart_is_no_recommendation(tmp_path: Path, fakes, capsys) -> None:
    """Two configurations of one cost: the A/B cannot tell them apart, exit 3, the best estimate provisional."""
    code, data = _recommend(tmp_path, "--no-isolation", "--thread-counts", "1,2")
    out = capsys.readouterr().out
    if data["ab"]["confirmed"]:  # a fake of one cost confirmed by chance (p < 0.05): nothing to check here
        pytest.skip("the A/B of two equal configurations confirmed by chance")
    assert code == EXIT_UNJUDGED and data["verdict"] == "not_judged"
    assert data["not_judged"].startswith("the A/B could not tell the best estimate from the runner-up")
    assert data["reasons"][0].startswith("not judged: the A/B could not tell")
    md = (tmp_path / "rec" / "recommend.md").read_text()
    for text in (out, md, (tmp_path / "rec" / "recommend.html").read_text()):
        _no_decision(text)


def test_a_schema_1_file_that_could_not_judge_renders_without_deploy_or_star() -> None:
    """recommend.json of schema 1 (no verdict field) said "deploy" although unjudged: read as provisional."""
    data = {"model": "m", "traffic": "t", "method": "halving", "cost_s": 1.0, "pareto": ["a"], "chosen": "a",
            "runner_up": "b", "unjudged": ["a: 3 probe(s) contended"], "ab": {"confirmed": False},
            "constraints": {"bound_ms": 5, "percentile": 99, "drift_tolerance": None, "memory_cap_mb": None},
            "reasons": ["not judged, the machine was loaded: a", "deploy a: it holds p99 <= 5 ms up to 100"],
            "candidates": [{"name": n, "drift": 0.0, "memory_mb": 10, "rung": 1, "cost_s": 1, "refusal": None,
                            "capacity": {"estimate": e, "low": e - 1, "high": e + 1, "knee": None, "cliff": 150.0,
                                         "floor_ms": 1.0, "status": "found", "rates_probed": 9}}
                           for n, e in (("a", 100.0), ("b", 90.0))]}
    md, html = render_markdown(data), render_html(data)
    for text in (md, html):
        _no_decision(text)
    assert "best estimate (provisional, not a recommendation): a: it holds" in md
    judged = {**data, "unjudged": [], "ab": {"confirmed": True}}
    assert "★" in render_markdown(judged) and "- deploy a: it holds" in render_markdown(judged)


def test_a_runtime_this_interpreter_lacks_runs_in_its_own_environment(tmp_path: Path, fakes, fake_env,
                                                                      monkeypatch, capsys) -> None:
    """fakert-cpu needs harness-fakert, which this interpreter lacks: as `harness run` does, recommend builds its
    environment (from a folder of wheels) and starts that configuration's worker with the environment's Python;
    with --envs off, or in this process (--no-isolation), it is left out, saying why."""
    import env_fakes

    stop_forkserver()
    wheels = tmp_path / "wheels"
    env_fakes.make_wheel(wheels, "1.0.0", 0.0)
    monkeypatch.setenv("HARNESS_PLUGINS", "fakes,env_fakes")  # what the workers load
    argv = ["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "mlp",
            "--runtimes", "fakert-cpu", "--slo-ms", "50", "--requests", "200", "--max-requests", "400",
            "--probes", "4", "--search-tolerance", "0.3", "--ab-pairs", "5", "--grid", "--env-wheels", str(wheels),
            "--cache-dir", str(tmp_path / "cache")]
    main([*argv, "--out", str(tmp_path / "rec")])
    data = json.loads((tmp_path / "rec" / "recommend.json").read_text())
    out = capsys.readouterr().out
    rt = next(c for c in data["candidates"] if c["name"].startswith("fakert-cpu"))
    assert rt["refusal"] is None and rt["capacity"]["estimate"] > 0, rt["refusal"]
    assert rt["environment"]["packages"] == {"harness-fakert": "1.0.0"}
    assert "environment " in out and "for fakert-cpu [harness-fakert]: built in" in out
    main([*argv, "--envs", "off", "--out", str(tmp_path / "off")])
    off = json.loads((tmp_path / "off" / "recommend.json").read_text())
    rt = next(c for c in off["candidates"] if c["name"].startswith("fakert-cpu"))
    assert "harness-fakert is not importable" in rt["refusal"]
    main([*argv, "--no-isolation", "--out", str(tmp_path / "in")])
    here = json.loads((tmp_path / "in" / "recommend.json").read_text())
    rt = next(c for c in here["candidates"] if c["name"].startswith("fakert-cpu"))
    assert "runs in an environment of its own (harness-fakert), which needs the supervised worker" in rt["refusal"]


def test_a_set_up_that_fails_before_the_worker_answers_closes_the_worker(tmp_path: Path, fakes) -> None:
    """recommend hung at its end when a configuration failed its set-up in the parent (the reference's feed
    refused a --seed of -1): the worker it had started waited for commands forever. Any failure of the set-up now
    closes the worker first."""
    import psutil

    from harness.execution.capacity_worker import IsolatedConfig
    from harness.model import get_model
    from harness.traffic.spec import TrafficSpec
    from harness.workloads.capacity.live import ConfigRef, _Pool

    ref = ConfigRef("fake-linear", None, "fake-ok", "fp32", "base", 1, None, TrafficSpec(requests=10),
                    str(tmp_path / "cache"), 1.0)

    def broken_reference() -> None:
        raise ValueError("the reference's feed refused the seed")

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    cfg = IsolatedConfig(ref, get_model("fake-linear"), _Pool(), broken_reference)
    with pytest.raises(ValueError, match="refused the seed"):
        cfg.open()
    assert cfg._proc is None and cfg._conn is None
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before
            and "harness-recommend" in " ".join(p.cmdline())]
    assert not left, left
    stop_forkserver()


def test_a_worker_whose_start_fails_is_closed_without_a_join(tmp_path: Path, fakes, monkeypatch) -> None:
    """A signal (or an OSError: an AF_UNIX path too long in $TMPDIR) inside Process.start() left a process that never
    started; closing it joined it ("can only join a started process"), and that error replaced the signal: exit 3
    where the signal's 130 / 143 was due. The start's own exception now comes through, the log removed."""
    from harness.execution import capacity_worker
    from harness.execution.capacity_worker import IsolatedConfig
    from harness.model import get_model
    from harness.traffic.spec import TrafficSpec
    from harness.workloads.capacity.live import ConfigRef, _Pool

    class Context:  # worker_context()'s stand-in: a Process whose start() is interrupted
        def Pipe(self, duplex):  # noqa: N802 - multiprocessing's name
            import multiprocessing

            return multiprocessing.Pipe(duplex)

        def Process(self, **kwargs):  # noqa: N802
            import multiprocessing

            proc = multiprocessing.get_context("fork").Process(**kwargs)
            proc.start = lambda: (_ for _ in ()).throw(KeyboardInterrupt())
            return proc

    monkeypatch.setattr(capacity_worker, "worker_context", Context)
    ref = ConfigRef("fake-linear", None, "fake-ok", "fp32", "base", 1, None, TrafficSpec(requests=10),
                    str(tmp_path / "cache"), 1.0)
    cfg = IsolatedConfig(ref, get_model("fake-linear"), _Pool(), None, log_dir=str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        cfg.open()
    assert cfg._proc is None and cfg._conn is None and not list(tmp_path.glob("harness-recommend-*"))


def test_a_named_free_axis_is_sized_by_the_traffic_never_by_an_option_recommend_lacks(tmp_path: Path, capsys) -> None:
    """recommend advised `--shape` for a model's named free axis, an option it does not take, and never looked at
    the traffic's histogram for that axis. The traffic now sizes it (one size), and the advice says so."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "height"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "height"])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = tmp_path / "hm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), model)
    argv = ["recommend", "--model", str(model), "--slo-ms", "50", "--requests", "100", "--max-requests", "200",
            "--probes", "4", "--search-tolerance", "0.3", "--ab-pairs", "5", "--no-isolation"]
    none = _traffic(tmp_path, "")
    assert main([*argv, "--traffic", str(none), "--out", str(tmp_path / "a")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "named 'height'" in err and "--shape" not in err and "[shapes.NAME] histogram of one size" in err
    two = tmp_path / "two.toml"
    two.write_text("requests = 100\n[arrival]\nrate = 200\n[shapes.height]\n32 = 1\n64 = 1\n")
    assert main([*argv, "--traffic", str(two), "--out", str(tmp_path / "b")]) == EXIT_USAGE
    assert "dimension 'height' takes 2 sizes (32, 64)" in capsys.readouterr().err
    one = tmp_path / "one.toml"
    one.write_text("requests = 100\n[arrival]\nrate = 200\n[shapes.height]\n32 = 1\n")
    assert main([*argv, "--traffic", str(one), "--out", str(tmp_path / "c")]) in (EXIT_CLEAN, EXIT_UNJUDGED)
    data = json.loads((tmp_path / "c" / "recommend.json").read_text())
    assert all(not c.get("refusal") for c in data["candidates"]), data["candidates"]


@pytest.mark.e2e
@pytest.mark.parametrize("sig, code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_stops_recommend_keeps_what_finished_and_says_so(tmp_path: Path, fake_env, sig: str, code: int,
                                                                  request: pytest.FixtureRequest) -> None:
    """A Ctrl-C early in a search was swallowed (the run finished, exit 3, recommend.json marked finished); SIGTERM
    killed recommend with no message, no recommend.md / .html and its workers' logs left in $TMPDIR. Now both stop
    it as they stop `harness run`: exit 130 / 143, recommend.json kept unfinished (--resume goes on from it),
    recommend.md and .html say it was interrupted and recommend nothing, no worker or log left behind."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    # a short $TMPDIR of its own: multiprocessing's socket goes there, and an AF_UNIX path holds at most 107 bytes
    # (under pytest-xdist, tmp_path/"tmp" + pymp-*/listener-* is longer: the workers could not start)
    tmp = Path(tempfile.mkdtemp(prefix="hrec-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    out = tmp_path / "rec"
    env = dict(fake_env, TMPDIR=str(tmp))
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "recommend", "--traffic", str(_traffic(tmp_path)),
                             "--model", "fake-linear", "--runtimes", "fake-ok,fake-ok-b", "--slo-ms", "50",
                             "--requests", "2000", "--max-requests", "16000", "--probes", "25",
                             "--search-tolerance", "0.001",
                             "--ab-pairs", "5", "--grid", "--out", str(out)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # the signal early in the first searches (a grid to 1% on 2,000-16,000 requests), once a worker is starting (its
    # log in the scratch folder), however long the imports took on a loaded machine (a fixed 4 s could land first)
    deadline = time.monotonic() + 120
    while not list((out / ".scratch").glob("harness-recommend-*")) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(getattr(signal, sig))
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, (proc.returncode, stdout[-2000:], stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    data = json.loads((out / "recommend.json").read_text())
    assert data["finished"] is False and data["interrupted"] == sig and data["verdict"] == "not_judged"
    md = (out / "recommend.md").read_text()
    assert f"interrupted by {sig}" in md and "deploy" not in md and "★" not in md
    assert (out / "recommend.html").is_file()
    assert f"recommend: interrupted by {sig}" in stdout
    assert not [f for f in os.listdir(tmp) if f.startswith("harness-recommend-")], os.listdir(tmp)
    assert not (out / ".scratch").exists()  # the workers' logs, removed whatever stopped the command


def test_the_options_become_a_typed_configuration(tmp_path: Path, fakes, capsys) -> None:
    """recommend composes the run's option groups and its own (harness.options.capacity) into one RunConfig: the
    matrix's runtimes, precisions and variants, the process's isolation, the cache, the output folder and the
    capacity section; its old spellings (--tolerance, --seed, --threads LIST: a name that means another thing in
    `harness run`) still give the same configuration for one release, one line each on stderr."""
    from harness.cli import _parser
    from harness.options import parse_capacity_options

    base = ["recommend", "--traffic", str(_traffic(tmp_path)), "--model", "fake-linear", "--runtimes", "fake-ok",
            "--slo-ms", "5", "--variants", "base,opt=basic", "--no-isolation", "--cache-dir", str(tmp_path / "c"),
            "--out", str(tmp_path / "o")]

    def config(*extra: str):
        return parse_capacity_options(vars(_parser().parse_args([*base, *extra])))

    new = config("--search-tolerance", "0.2", "--traffic-seed", "7", "--thread-counts", "1,2")
    assert capsys.readouterr().err == ""
    cap = new.capacity
    assert (cap.model_ref, cap.slo_ms, cap.slo_percentile, cap.thread_counts, cap.search_tolerance,
            cap.traffic_seed, cap.capacity_ab_pairs, cap.batchers) == ("fake-linear", 5.0, 99.0, (1, 2), 0.2, 7, 8,
                                                                       ("none",))
    assert new.matrix.runtimes == ("fake-ok",) and new.matrix.variants == (None, "opt=basic")
    assert not new.process.isolation and new.artifacts.cache_dir == tmp_path / "c"
    assert new.outputs.out_dir == tmp_path / "o" and not (tmp_path / "o").exists()  # nothing made by parsing
    old = config("--tolerance", "0.2", "--seed", "7", "--threads", "1,2")
    err = capsys.readouterr().err.splitlines()
    assert old.capacity == new.capacity and len(err) == 3, err
    assert all(line.startswith("harness: ") and " is deprecated and goes in the next release: " in line
               for line in err)
    assert "use --search-tolerance" in err[0] and "use --traffic-seed" in err[1] and "--thread-counts 1,2" in err[2]
    assert config("--threads", "2").capacity.thread_counts == (2,)  # one count: run's meaning, no line
    assert capsys.readouterr().err == "" and config().capacity.thread_counts == (1,)
    assert "recommend-" in str(parse_capacity_options(vars(_parser().parse_args(base[:-2]))).outputs.out_dir)
    from harness.errors import UsageError

    with pytest.raises(UsageError, match="--threads and --thread-counts both given"):
        config("--threads", "2", "--thread-counts", "1,2")
