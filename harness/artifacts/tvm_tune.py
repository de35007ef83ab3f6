"""TvmTunedFromOnnx: MetaSchedule tuning of an ONNX file for a trial budget, compiled with its database into a
cached .so; the tuning runs in a child process (a crash is a skip with its cause; docs/runtimes.md)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import UnsupportedModelError, install_hint

TUNER = (sys.executable, "-m", "harness.artifacts.tvm_tune")
TUNING_DIR = "tuning"  # in the artifact folder: job.json, result.json, tuner.log, the JSON database, logs/
RECORDS = "database_tuning_record.json"  # MetaSchedule's JSONDatabase: one line per measured candidate


@dataclass(frozen=True)
class TvmTunedFromOnnx:
    """Lazy build step: Relax ONNX frontend -> MetaSchedule (tune_relax, `trials` in all, split evenly over the
    tasks) -> MetaScheduleApplyDatabase -> tvm.compile -> .so, for one static input shape.

    target: a TVM target dict; tuning adds "num-cores" (the run's threads) since the schedules depend on it.
    command: the tuner's command line (None: TUNER, read when it runs, so a test can substitute a fake one);
    the job file's path is appended.
    """

    onnx: Artifact
    cache: ArtifactCache
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    target: Mapping[str, Any]
    trials: int
    tvm_version: str
    label: str = "model"
    command: tuple[str, ...] | None = None

    def key_parts(self) -> dict[str, Any]:
        return {"onnx": self.onnx.key, "shapes": {k: list(v) for k, v in self.shapes.items()},
                "dtypes": dict(self.dtypes), "target": dict(self.target), "trials": self.trials,
                "tvm": self.tvm_version, "step": "TvmTunedFromOnnx/1"}

    def __call__(self) -> Artifact:
        shape_label = "-".join("x".join(map(str, s)) for s in self.shapes.values())
        return self.cache.get_or_build("tvm-tuned", f"{self.label}-{shape_label}-t{self.trials}",
                                       self.key_parts(), "model.so", self._build)

    def _build(self, path: Path) -> dict[str, Any]:
        work = path.parent / TUNING_DIR
        work.mkdir()
        job = {"onnx": str(self.onnx.path), "shapes": {k: list(v) for k, v in self.shapes.items()},
               "dtypes": dict(self.dtypes), "target": dict(self.target), "trials": self.trials,
               "work_dir": str(work), "out": str(path)}
        result = run_tuner(self.command or TUNER, job, work)
        return {"tuned": True, "inputs": list(self.shapes), "target": dict(self.target), **result}


def run_tuner(command: Sequence[str], job: Mapping[str, Any], work: Path) -> dict[str, Any]:
    """Run the tuner child on `job` (written to work/job.json), its output in work/tuner.log; its result
    (work/result.json) with the trials it measured. A crash or failure is an UnsupportedModelError whose
    message is the cause in one line (the case becomes a skip with it)."""
    (work / "job.json").write_text(json.dumps(job, indent=1))
    log = work / "tuner.log"
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.run([*command, str(work / "job.json")], stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, check=False)
    wall = time.perf_counter() - t0
    result_path = work / "result.json"
    if proc.returncode != 0 or not result_path.is_file():
        text = log.read_text(errors="replace")
        sys.stderr.write("".join(text.splitlines(keepends=True)[-20:]))  # the case's stderr tail keeps it
        cause = crash_cause(text)
        hint = f" (the tvm extra pins what tuning needs: {install_hint('tvm')})" if _KNOWN.search(cause) else ""
        raise UnsupportedModelError(f"TVM MetaSchedule tuning {_how(proc.returncode)} after {wall:.0f} s: "
                                    f"{cause}{hint}")
    result = json.loads(result_path.read_text())
    result["tuning_trials_run"] = count_records(work)
    return result


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"crashed ({signal.Signals(-code).name})"
        except ValueError:
            return f"crashed (signal {-code})"
    return f"failed (exit status {code})" if code else "wrote no result"


_KNOWN = re.compile(r"xgboost|ToJSONGraph")  # causes an environment without the tvm extra's pins shows
_ERROR_LINE = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception|Interrupt)|Check failed)\b.*")
_NATIVE_FRAME = re.compile(r"\bin ((?:tvm|ffi)::[\w:<>~]+)")


def crash_cause(text: str) -> str:
    """The one-line cause in a tuner's output: the last Python error line; for a native crash, TVM's banner
    with the first TVM frame of its stack; else the last non-blank line."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    errors = [ln.strip() for ln in lines if _ERROR_LINE.match(ln)]
    if errors:
        return errors[-1][:300]
    banner = next((i for i, ln in enumerate(lines) if "Segfault encountered" in ln or "Fatal Python error" in ln),
                  None)
    if banner is not None:
        frame = next((m.group(1) for ln in lines[banner:] if (m := _NATIVE_FRAME.search(ln))), None)
        head = lines[banner].strip(" !")
        return f"{head} in {frame}" if frame else head
    return lines[-1].strip()[:300] if lines else "no output"


def count_records(work: Path) -> int:
    """Candidates MetaSchedule measured (one JSON line each in its database)."""
    path = work / RECORDS
    if not path.is_file():
        return 0
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the worker that started it dies (a case timeout kills it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the tuning then outlives a killed worker until it ends


def build_without_intrinsics(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's builder function less its `import tvm.s_tir.tensor_intrin`: that import registers every
    backend's intrinsics (CUDA, ROCm, Hexagon ...) and takes 30-75 s here, in each builder process, which
    LocalBuilder restarts for every batch: each batch then times out (30 s) and no candidate builds."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm_build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def tune(job: Mapping[str, Any]) -> dict[str, Any]:
    """The child's work: import, tune, compile with the database, export; what it did, for result.json."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import meta_schedule as ms

    from harness.artifacts.tvm_tune import build_without_intrinsics as f_build  # by reference, not __main__

    work = str(job["work_dir"])
    model = onnx.load(str(job["onnx"]))
    mod = from_onnx(model, shape_dict=dict(job["shapes"]), dtype_dict=dict(job["dtypes"]), keep_params_in_input=False)
    target = tvm.target.Target(dict(job["target"]))
    trials = int(job["trials"])
    t0 = time.perf_counter()
    with target:
        mod = tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                        relax.transform.CanonicalizeBindings(), relax.get_pipeline("zero")])(mod)
    tasks = ms.relax_integration.extract_tasks(mod, target, {})
    per_task = max(1, trials // max(1, len(tasks)))  # rounds of whole tasks; a budget under the task count
    # tunes the first tasks only (MetaSchedule stops at max_trials_global)
    print(f"harness: {len(tasks)} tasks, {trials} trials, at most {per_task} per task", flush=True)
    ms.relax_integration.tune_relax(
        mod, {}, target, work, max_trials_global=trials, max_trials_per_task=per_task,
        num_trials_per_iter=min(64, per_task), builder=ms.builder.LocalBuilder(max_workers=1, f_build=f_build),
        runner=ms.runner.LocalRunner(), seed=0)
    tuning_s = time.perf_counter() - t0
    with target, tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.MetaScheduleApplyDatabase(work)(mod)
    tvm.compile(mod, target=target).export_library(str(job["out"]))
    return {"tuning_s": round(tuning_s, 3), "tuning_tasks": len(tasks), "tuning_trials": trials,
            "compile_s": round(time.perf_counter() - t0 - tuning_s, 3), "tvm": tvm.__version__}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    job_path = Path(args[0])
    job = json.loads(job_path.read_text())
    os.environ.setdefault("TVM_NUM_THREADS", str(job["target"].get("num-cores", 1)))
    result = tune(job)
    (job_path.parent / "result.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
