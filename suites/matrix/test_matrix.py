"""The matrix suite: one test per case (model x runtime x precision x shape).

Each case is measured (warm-up, timed loop, raw samples) and judged for accuracy drift against the model's
FP32 reference on the same seeded feed, in a supervised worker. A case over its drift tolerance, a crash, a
timeout or a memory-cap hit fails its test; an unavailable runtime or unsupported precision skips it with
the reason.
"""

from harness.pytest_plugin import check_result


def test_case(harness_case, harness_session):
    check_result(harness_session.execute(harness_case))
