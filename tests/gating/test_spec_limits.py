"""tools/spec_limits.py: a spec's limits re-chosen from a clean reference run (docs/qualification.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("spec_limits", ROOT / "tools" / "spec_limits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _case(runtime, status="passed", p50=1.234, p99=2.345, tput=810.0, gpu=932.0, contended=False, noisy=False):
    return {"case": {"model": "resnet18", "runtime": runtime, "precision": "fp32", "batch": 1, "seq": None},
            "status": status, "reason": "why not" if status != "passed" else "",
            "latency": {"p50_ms": p50, "p99_ms": p99, "noisy": noisy}, "throughput_sps": tput,
            "gpu_peak_mb": gpu, "contention": {"contended": contended}}


TEMPLATE = """
name = "t"
[measure]
min_time = 2.0
[defaults.require]
drift_within_tolerance = true
[[case]]
model = "resnet18"
runtime = "ort-cuda"
[case.require]
p50_ms_max = 9.0
p99_ms_max = 9.0
throughput_sps_min = 1
gpu_peak_mb_max = 9
rel_l2_max = 0.001
[[case]]
model = "resnet18"
runtime = "tensorrt"
[case.require]
p99_ms_max = 1.0
[[case]]
model = "resnet18"
runtime = "torch-cuda"
[case.require]
p99_ms_max = 1.0
[[case]]
model = "resnet18"
runtime = "ort-cuda-h2h"
[case.require]
p99_ms_max = 1.0
"""


def test_limits_come_from_the_measured_figures_with_stated_headroom_rounded_outwards(tool, tmp_path):
    results = {"run_id": "r1", "environment": {}, "cases": [
        _case("ort-cuda"), _case("tensorrt", status="skipped"), _case("torch-cuda", contended=True),
        _case("ort-cuda-h2h", noisy=True)]}
    kept, dropped = tool.derive(results, tomllib.loads(TEMPLATE))
    (only,) = kept
    req = only["require"]
    assert req["p50_ms_max"] == 1.9  # 1.234 x 1.5 = 1.851, up to two figures
    assert req["p99_ms_max"] == 4.7  # 2.345 x 2.0 = 4.69
    assert req["throughput_sps_min"] == 540  # 810 / 1.5 = 540 exactly, down
    assert req["gpu_peak_mb_max"] == 1200  # 932 x 1.25 = 1165
    assert req["rel_l2_max"] == 0.001  # a drift limit of the template is kept
    assert [d.split(":")[0] for d in dropped] == ["resnet18 tensorrt fp32 b1", "resnet18 torch-cuda fp32 b1",
                                                  "resnet18 ort-cuda-h2h fp32 b1"]
    assert "skipped" in dropped[0] and "contended" in dropped[1] and "noisy" in dropped[2]
    out = tool.render(tomllib.loads(TEMPLATE), kept, dropped, "run.json", {"_run_id": "r1"}, "h", None)
    spec = tomllib.loads(out)  # a valid spec again, with the reasons as comments
    assert spec["name"] == "h" and len(spec["case"]) == 1 and "# left out: resnet18 tensorrt" in out


def test_a_limit_is_never_invented(tool, tmp_path):
    results = {"cases": [_case("tensorrt", status="skipped")]}
    src, tpl, out = tmp_path / "r.json", tmp_path / "t.toml", tmp_path / "o.toml"
    import json

    src.write_text(json.dumps(results))
    tpl.write_text(TEMPLATE)
    assert tool.main([str(src), str(tpl), str(out)]) == 1 and not out.exists()
