"""`harness run --ray` against a real local Ray cluster (head + workers with custom resources): sharding by
resources, a killed node costs only its cases, one merged results folder. Needs the [ray] extra."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.config import RunConfig
from harness.execution.ray_shards import Node, Shard, ShardDeadline, ShardRun, _wait, plan_shards
from harness.options import placement_rules
from harness.results import load_results
from harness.results.schema import CaseId, CaseResult

TESTS = Path(__file__).resolve().parents[1]


def _require_ray():
    if os.environ.get("HARNESS_REQUIRE_RAY"):  # .ci/extras: a skip here would hide the Ray path
        import ray

        return ray
    return pytest.importorskip("ray", reason="Ray is the [ray] extra: pip install -c constraints/cpu.txt -e \".[ray]\"")


def test_plan_shards_by_resources_and_activation():
    nodes = [Node("a" * 16, "10.0.0.1", {"CPU": 2}), Node("b" * 16, "10.0.0.2", {"CPU": 2, "edge": 1})]
    cases = [CaseId("m", rt, "fp32", b, None, "cpu") for rt in ("r1", "r2", "r3", "slow", "gpu-x")
             for b in (1, 2)]
    shards, unplaced = plan_shards(cases, nodes, placement_rules("slow=edge,gpu-*=GPU", "placement"))
    by_node = {s.node.address: {c.runtime for c in s.cases} for s in shards}
    assert "slow" in by_node["10.0.0.2"] and "slow" not in by_node["10.0.0.1"]
    assert sum(len(s.cases) for s in shards) == 8 and {len(s.cases) for s in shards} == {4}
    assert all(len({c.runtime for c in s.cases if c.runtime == rt}) <= 1 for s in shards for rt in ("r1",))
    assert [c.case.runtime for c in unplaced] == ["gpu-x", "gpu-x"] and all(c.status == "skipped" for c in unplaced)
    assert "no node in the Ray cluster has the resource 'GPU'" in unplaced[0].reason
    with pytest.raises(Exception, match="expected RUNTIME-GLOB=RESOURCE"):
        placement_rules("ort-cuda*", "placement")


def test_the_node_deadline_follows_what_the_peers_needed():
    d = ShardDeadline(blocks=2, case_timeout_s=600.0)  # one case, --repeats 2
    limit, basis = d.seconds([])
    assert limit == 2 * 600 + 60 and "the longest a shard may run" in basis  # no peer finished yet: the cap
    assert d.seconds([4.0, 5.0, 100.0])[0] == 300.0  # 10 x 5 s is under the floor
    limit, basis = d.seconds([40.0, 50.0, 60.0, 70.0])
    assert limit == 550.0 and basis == "10 x the median 55.0 s of 4 finished node(s), at least 300 s"
    assert d.seconds([200.0])[0] == 1260.0  # never past what the harness's own limits allow a shard
    assert ShardDeadline(2, 600.0, fixed_s=30.0).seconds([1.0]) == (30.0, "--node-deadline")


def test_a_shard_past_its_deadline_is_lost_with_the_reason_its_peer_kept(tmp_path):
    """No Ray here: one shard's events never come (a hung node), its peer's finish; the hung one is cut at the
    deadline, its case crashed with the reason, and an event arriving after that is dropped."""
    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), out_dir=tmp_path)
    case = CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu")
    hung, done = (ShardRun(config, Shard(Node(c * 16, "10.0.0.1", {"CPU": 1}), [case]), tmp_path) for c in "ab")
    release = threading.Event()

    def never():  # the hung node's stream: nothing until released, long after its deadline
        release.wait(30)
        yield ("case", CaseResult(case, "passed").as_dict())

    lines: list[str] = []
    running = []
    for sr, events in ((hung, never()), (done, iter([]))):
        sr.started = time.monotonic()
        t = threading.Thread(target=sr.consume, args=(events, lambda e: e, lines.append), daemon=True)
        t.start()
        running.append((sr, t, events))
    t0 = time.monotonic()
    _wait(running, [hung, done], ShardDeadline(1, 600.0, fixed_s=1.0), lines.append)
    assert 1.0 <= time.monotonic() - t0 < 20
    assert hung.closed and hung.error.startswith("no result within 1 s (node deadline: --node-deadline)")
    assert [c.status for c in hung.run.cases] == ["crashed"] and not hung.run.complete
    assert "lost before this case finished: no result within 1 s" in hung.run.cases[0].reason
    assert done.error is None and not done.closed
    assert any("shard lost (no result within 1 s" in line for line in lines)
    release.set()
    running[0][1].join(10)
    assert [c.status for c in hung.run.cases] == ["crashed"]  # the late result is not taken


class _Priorities:
    """A fake getpriority/setpriority: each thread's niceness, a Ray worker's 15 to start with; `refuse`: lowering
    one raises as the kernel does without the privilege (EACCES)."""

    def __init__(self, tids: list[int], start: int = 15, refuse: bool = False) -> None:
        self.nice = {0: start, **{t: start for t in tids}}
        self.refuse = refuse

    def get(self, which: int, who: int) -> int:
        return self.nice[who]

    def set(self, which: int, who: int, value: int) -> None:
        assert which == os.PRIO_PROCESS
        if self.refuse and value < self.nice[who]:
            raise PermissionError(13, "Permission denied")
        self.nice[who] = value
        if who == 101:  # the calling thread (who 0) is one of the process's threads
            self.nice[0] = value


def _tasks(tmp_path: Path, tids: list[int]) -> Path:
    for t in tids:
        (tmp_path / "task" / str(t)).mkdir(parents=True)
    return tmp_path / "task"


def test_a_node_measures_at_the_drivers_niceness_not_rays_worker_niceness(tmp_path):
    """Ray starts its workers at niceness 15: a shard left there yields to every busy process beside it (its set-up
    took 88 s beside two busy loops, so their load was gone before its first probe). Every thread of the shard's
    process is set to the driver's niceness, and the run's environment says what it measured at."""
    from harness.execution.ray_shards import measuring_priority, priority_line

    fake = _Priorities([101, 102, 103])
    got = measuring_priority(0, _tasks(tmp_path, [101, 102, 103]), fake.get, fake.set)
    assert got == {"driver": 0, "ray_worker": 15, "measuring": 0}
    assert fake.nice == {0: 0, 101: 0, 102: 0, 103: 0}  # every thread: those started later inherit it
    assert priority_line("10.0.0.1-aaaaaaaa", got) is None
    same = _Priorities([101], start=0)
    assert measuring_priority(0, _tasks(tmp_path / "s", [101]), same.get, same.set)["measuring"] == 0


def test_a_node_that_cannot_lower_its_niceness_says_so_and_how_to_start_it(tmp_path):
    from harness.execution.ray_shards import measuring_priority, priority_line

    fake = _Priorities([101, 102], refuse=True)
    got = measuring_priority(0, _tasks(tmp_path, [101, 102]), fake.get, fake.set)
    assert got["measuring"] == got["ray_worker"] == 15 and fake.nice == {0: 15, 101: 15, 102: 15}
    assert got["why"].startswith("PermissionError: Permission denied: start the node's raylet with "
                                 "RAY_worker_niceness=0")
    line = priority_line("10.0.0.1-aaaaaaaa", got)
    assert line.startswith("[10.0.0.1-aaaaaaaa] measures at niceness 15, not the driver's 0 (Ray's worker niceness; "
                           "PermissionError") and "RAY_worker_niceness=0" in line
    # the driver says it as the node's run arrives, and keeps it in the node's results.json environment
    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), out_dir=tmp_path / "o")
    case = CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu")
    sr = ShardRun(config, Shard(Node("a" * 16, "10.0.0.1", {"CPU": 1}), [case]), tmp_path / "o")
    lines: list[str] = []
    sr.consume(iter([("env", {"environment": {"niceness": got}, "started_at": "t"})]), lambda e: e, lines.append)
    assert lines == [line] and sr.run.environment.extra("niceness") == got


def test_the_real_call_sets_every_thread_of_the_process(tmp_path):
    """The real getpriority/setpriority in a child 5 above the niceness it started at (0, or what a niced pytest
    gave it) with a second thread: both taken back where this user may lower a niceness (root, CAP_SYS_NICE), both
    left 5 above with the reason where it may not."""
    import json
    import subprocess

    code = ("import json, os, threading, time\n"
            "base = os.getpriority(os.PRIO_PROCESS, 0); os.nice(5)\n"
            "ev = threading.Event(); t = threading.Thread(target=ev.wait, daemon=True); t.start()\n"
            "from harness.execution.ray_shards import measuring_priority\n"
            "got = measuring_priority(base)\n"
            "got['threads'] = [os.getpriority(os.PRIO_PROCESS, int(x)) for x in os.listdir('/proc/self/task')]\n"
            "print(json.dumps(got))\n")
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    timeout=60).stdout)
    base = got["driver"]
    assert got["ray_worker"] == min(base + 5, 19) and len(got["threads"]) >= 2
    if "why" in got:
        assert got["measuring"] == got["ray_worker"] and set(got["threads"]) == {got["ray_worker"]}
        assert f"RAY_worker_niceness={base}" in got["why"]
    else:
        assert got["measuring"] == base and set(got["threads"]) == {base}


@pytest.mark.parametrize("answers", [True, False])
def test_connect_puts_back_the_commands_sigterm_handler_over_rays(monkeypatch, answers):
    """ray.init installs Ray's own SIGTERM handler (sys.exit(15): no line, no files, exit status 15). connect() puts
    back the handler the command had, whether the cluster answered or not: a SIGTERM outside a wait on the nodes
    (the merge, the verdict's files, the summary) ends a --ray command as it ends the local one. A stand-in of
    Ray's module; the real ray.init: test_sharded_by_resources_into_one_merged_folder."""
    from harness.errors import UsageError
    from harness.execution import ray_shards

    def init(address, **kw):  # as ray.init: its handler first (worker.py), then the connection
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
        if not answers:
            raise ConnectionError("could not reach the GCS")

    node = {"NodeID": "a" * 16, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 1.0}, "Alive": True}
    monkeypatch.setitem(sys.modules, "ray", SimpleNamespace(init=init, is_initialized=lambda: False,
                                                           nodes=lambda: [node]))
    monkeypatch.setattr(ray_shards, "probe_address", lambda address, timeout=None: None)

    def mine(signum, frame):  # the command's handler
        raise AssertionError("not called here")

    before = signal.signal(signal.SIGTERM, mine)
    try:
        if answers:
            assert [n.address for n in ray_shards.connect("127.0.0.1:6379")] == ["10.0.0.1"]
        else:
            with pytest.raises(UsageError, match="cannot connect: ConnectionError"):
                ray_shards.connect("127.0.0.1:6379")
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.fixture(scope="module")
def cluster(fakes):
    _require_ray()
    from ray.cluster_utils import Cluster

    mp = pytest.MonkeyPatch()
    mp.setenv("HARNESS_PLUGINS", "fakes")  # the raylets and their workers inherit these
    mp.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), *sys.path]))
    from ray_head import RAY_HEAD

    c = Cluster(initialize_head=True, head_node_args=RAY_HEAD)  # a killed node seen dead in ~1.5 s
    c.add_node(num_cpus=1, resources={"edge": 1})
    c.wait_for_nodes()
    yield c
    import ray

    ray.shutdown()
    c.shutdown()
    mp.undo()


ARGS = ["run", "--models", "fake-linear", "--min-time", "0.01", "--min-iters", "3", "--repeats", "1"]


def test_sharded_by_resources_into_one_merged_folder(cluster, tmp_path, capsys):
    from harness.cli import main

    import ray

    assert not ray.is_initialized()  # this command's connect() makes the real ray.init
    sigterm = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "run"
    code = main([*ARGS, "--runtimes", "fake-ok,fake-ok-b,fake-slow,fake-ok-c", "--batch-sizes", "1,2",
                 "--ray", cluster.address, "--placement", "fake-slow=edge,fake-ok-c=accelerator_type:H100",
                 "--out", str(out), "--history", f"sqlite:///{tmp_path / 'h.db'}"])
    captured = capsys.readouterr()
    text = captured.out
    assert code == 0, text + captured.err
    folders = sorted(p.parent for p in out.glob("*/results.json"))
    runs = {p.name: load_results(p) for p in folders}
    edge = next(n for n in cluster.list_all_nodes() if n is not cluster.head_node)
    edge_run = next(r for name, r in runs.items() if r.environment.extra("ray_node") == edge.node_id)
    assert {c.case.runtime for c in edge_run.cases} >= {"fake-slow"}
    for name, run in runs.items():
        if run.environment.extra("ray_node") != edge.node_id:
            assert "fake-slow" not in {c.case.runtime for c in run.cases}, name
    unplaced = runs.pop("unplaced")
    assert {c.case.runtime for c in unplaced.cases} == {"fake-ok-c"} and unplaced.counts()["skipped"] == 2
    measured = [c for r in runs.values() for c in r.cases]
    assert len(measured) == 6 and all(c.status == "passed" for c in measured)
    assert len(runs) == 2 and all(r.complete and r.environment.machine_fingerprint for r in runs.values())
    html = (out / "report.html").read_text()  # one merged report: every node's column side by side
    assert html.count("fake-slow @") >= 1 and "no node in the Ray cluster has the resource" in html
    assert (out / "results.csv").read_text().count("\n") == 1 + 8
    assert text.count("history: recorded") == 2 and html.count("over 1 recorded runs</title>") == 6  # trend
    merged = load_results(out / "results.json")  # OUT/results.json and the table, as a local run gives them
    assert len(merged.cases) == 8 and len({c.case.id for c in merged.cases}) == 8 and not merged.interrupted
    assert {c.details["ray_node"] for c in merged.cases} == set(runs) | {"unplaced"}
    assert set(merged.environment.ray_nodes) == set(runs)
    assert "inference harness (ray)" in text and "fake-linear-fake-slow-fp32-b1" in text and "p50_ms" in text
    assert "6 passed, 2 skipped" in text and f"json: {out / 'results.json'}" in text
    assert signal.getsignal(signal.SIGTERM) is sigterm  # ray.init's own handler not left behind (connect)


def test_a_killed_node_costs_only_its_cases(cluster, tmp_path, capsys):
    from harness.cli import main
    from harness.execution import ray_shards

    doomed = cluster.add_node(num_cpus=1, resources={"doomed": 1})
    cluster.wait_for_nodes()
    killed = threading.Event()
    real_note = print

    def note(line: str) -> None:  # kill the node as soon as its first case has come back
        real_note(line)
        if "fake-slow" in line and "passed" in line and not killed.is_set():
            killed.set()
            cluster.remove_node(doomed, allow_graceful=False)

    orig = ray_shards.ray_run
    out = tmp_path / "run"
    try:
        ray_shards.ray_run = lambda config, _note=print: orig(config, note)
        code = main([*ARGS, "--runtimes", "fake-ok,fake-slow", "--batch-sizes", "1,2,3,4", "--min-time", "0.5",
                     "--ray", cluster.address, "--placement", "fake-slow=doomed", "--out", str(out)])
    finally:
        ray_shards.ray_run = orig
    text = capsys.readouterr().out
    assert killed.is_set(), text
    assert code == 1  # crashed cases: the run still finished, with a report
    runs = [load_results(p) for p in out.glob("*/results.json")]
    lost = next(r for r in runs if r.environment.extra("ray_node") == doomed.node_id)
    # the doomed node holds the fake-slow cases (placed there); Ray may give it the unplaced fake-ok shard too
    slow = [c for c in lost.cases if c.case.runtime == "fake-slow"]
    statuses = [c.status for c in slow]
    # the cases that came back before the node died keep their rows (the kill is asynchronous: one more case
    # may finish first); every later one is crashed with the reason
    n_passed = statuses.count("passed")
    assert len(statuses) == 4 and 1 <= n_passed <= 3 and not lost.complete
    assert statuses == ["passed"] * n_passed + ["crashed"] * (4 - n_passed), statuses
    assert "lost before this case finished" in slow[-1].reason
    fast = [c for r in runs for c in r.cases if c.case.runtime == "fake-ok"]
    assert len(fast) == 4 and all(c.status == "passed" or (c.status == "crashed" and "lost before" in c.reason)
                                  for c in fast)
    assert all(c.status == "passed" for r in runs if r is not lost for c in r.cases)
    assert (out / "report.html").is_file() and "shard lost" in text


def test_without_ray_the_option_is_a_one_line_usage_error(monkeypatch, tmp_path, capsys, fakes):
    from harness.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # as if the [ray] extra were not installed
    assert main([*ARGS, "--runtimes", "fake-ok", "--ray", "auto", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip() == 'harness run: error: --ray needs Ray: pip install -c constraints/cpu.txt -e ".[ray]"'


def test_an_address_where_nothing_listens_is_one_line_exit_2(tmp_path, capsys, fakes, closed_port):
    """A closed port on 127.0.0.1: the probe (a TCP connect before ray.init) answers at once; Ray not needed."""
    from harness.cli import main

    port = closed_port  # nothing listens there
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        out = tmp_path / "r"
        assert main([*ARGS, "--runtimes", "fake-ok", "--ray", address, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err == (f"harness run: error: --ray {address}: nothing answers at 127.0.0.1:{port} (Connection "
                       f"refused); start the cluster (`ray start --head --port {port}`) or give its address\n")
        assert not out.exists()
    assert main([*ARGS, "--runtimes", "fake-ok", "--ray", "127.0.0.1", "--out", str(tmp_path / "r")]) == 2
    assert "expected auto, HOST:PORT or ray://HOST:PORT" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["http", "silent", "closes", "garbage"])
def test_an_address_that_answers_but_is_not_ray_is_one_line_exit_2(kind, tmp_path, capsys, fakes, monkeypatch):
    """Something that is not Ray at HOST:PORT (a real http.server on loopback, a peer that says nothing, one
    that hangs up, one that answers bytes that are no HTTP/2): one line and exit 2 well within 30 s, before
    Ray is imported (ray.init would retry for minutes)."""
    import socket
    import time
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from harness.cli import main
    from harness.execution import ray_shards

    stop = threading.Event()
    if kind == "http":
        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, *args):  # the server's own lines would go to the captured stderr
                pass

        server = HTTPServer(("127.0.0.1", 0), Quiet)
        port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def serve():
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                if kind == "closes":
                    conn.close()
                elif kind == "garbage":
                    conn.sendall(b"\x15\x03\x03\x00\x02\x02\x28" * 3)
                else:
                    stop.wait(5)  # silent: holds the connection
                    conn.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
    try:
        monkeypatch.setattr(ray_shards, "PROBE_TIMEOUT_S", 1.0)
        t0 = time.monotonic()
        out = tmp_path / "r"
        assert main([*ARGS, "--runtimes", "fake-ok", "--ray", f"127.0.0.1:{port}", "--out", str(out)]) == 2
        assert time.monotonic() - t0 < 30
    finally:
        stop.set()
        if kind == "http":
            server.shutdown()
            server.server_close()
        else:
            listener.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"harness run: error: --ray 127.0.0.1:{port}: 127.0.0.1:{port} "
                                                  "answers but is not a Ray cluster (")
    assert {"http": "an HTTP/1 server: it answered '", "silent": "said nothing within 1 s",
            "closes": "closed the connection", "garbage": "not the HTTP/2 SETTINGS frame"}[kind] in err
    assert not out.exists()


def test_the_probe_takes_an_http2_server_as_ray():
    """A peer whose first frame is HTTP/2 SETTINGS on stream 0 (what a gRPC server such as Ray's GCS sends)
    passes the probe."""
    import socket

    from harness.execution.ray_shards import probe_address

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        conn.recv(64)
        conn.sendall(b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00\x03\x00\x00\x00\x64")
        try:
            conn.recv(64)
        except OSError:  # the probe hangs up once it has read the frame
            pass
        conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        probe_address(f"127.0.0.1:{port}", timeout=2.0)
    finally:
        listener.close()
