"""Shared fixtures: fake plugins on the path, a private artifact cache, helpers to run the harness."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))
# The tests' own runs are judged on what they test, not on how busy the machine running them is: no block is
# called contended unless a test sets a limit itself (tests/measure/test_contention.py, the gating tests give
# contention explicitly). Subprocesses inherit it.
os.environ.setdefault("HARNESS_CONTENTION_LIMIT", "1")


# The end-to-end tier: tests that drive the harness as a user does (subprocess runs, real crashes, hangs,
# timeouts and signals, real exports, environments built with pip) and take seconds each. `pytest tests` (the
# README's command) leaves them out; `pytest tests -m e2e` runs them (CI runs both). Chosen from a timed run of
# the whole suite (--durations): every test of 4 s or more, by file and function; tests marked `slow` are in it too.
E2E_TIER: dict[str, tuple[str, ...]] = {
    "tests/accuracy/test_localize.py": ("test_broken_weight_fails_the_case_and_localisation_names_the_changed_node",),
    "tests/artifacts/test_export_text.py": ("test_text_model_exports_with_symbolic_batch_and_seq",),
    "tests/conformance/test_conformance_run.py": ("test_a_terminated_conform_keeps_every_finished_case",
                                                  "test_each_misbehaviour_costs_exactly_its_rows"),
    "tests/envs/test_envs.py": ("test_bisect_names_the_slower_release_of_a_published_package",
                                "test_cases_run_in_their_environments_and_a_broken_one_is_a_skip",
                                "test_envs_ls_and_clear"),
    "tests/execution/test_ab_workload.py": ("test_the_cli_runs_two_model_files_and_exits_1_on_a_regression",),
    "tests/execution/test_batcher.py": ("test_the_batchers_figures_survive_results_json_and_the_report_draws_its_curve",),
    "tests/execution/test_end_to_end.py": ("test_the_zoo_pipelines_make_the_models_feeds",),
    "tests/execution/test_isolation.py": ("test_a_second_signal_during_the_stop_is_absorbed",
                                          "test_a_user_conv_module_with_default_threads_is_measured",
                                          "test_crash_inside_the_timed_loop_names_signal_and_phase",
                                          "test_good_crash_good_hang_good_oom_good",
                                          "test_interrupt_keeps_finished_cases_writes_report_and_leaves_no_worker",
                                          "test_sigkill_leaves_a_readable_results_file_and_no_worker"),
    "tests/execution/test_precision_cases.py": ("test_int8_options_reach_the_artifact_and_the_recipe_is_recorded",),
    "tests/execution/test_rounds.py": ("test_later_blocks_come_in_rounds_over_the_matrix",),
    "tests/execution/test_scenarios.py": ("test_cli_run_stores_scenarios_from_the_worker_and_renders_them",),
    "tests/gating/test_gating_cli.py": ("test_run_with_a_bad_baseline_is_a_usage_error_before_running",
                                       "test_run_with_baseline_gates_at_the_end"),
    "tests/gating/test_gating_gatecheck.py": ("test_gate_check_cli_end_to_end_on_fakes",
                                              "test_supervised_runs_measure_plain_and_slowed_blocks_in_a_worker_per_run"),
    "tests/gating/test_gating_qualify.py": ("test_qualify_runs_the_cases_end_to_end",),
    "tests/history/test_history_run.py": ("test_run_records_itself_and_draws_the_trend",),
    "tests/history/test_history_store.py": ("test_run_checks_the_history_before_it_starts",),
    "tests/models/test_byo_plugins.py": ("test_entry_point_of_an_installed_user_package_adds_a_model",
                                         "test_guide_onnx_example_runs_as_written",
                                         "test_harness_plugins_variable_adds_a_model",
                                         "test_readme_example_factory_runs_end_to_end"),
    "tests/models/test_zoo.py": ("test_digits_cnn_task_accuracy_per_runtime",),
    "tests/profile/test_flops_exports.py": ("test_tiny_bert_matmul_flops_are_the_analytic_ones",),
    "tests/report/test_progress.py": ("test_a_named_unavailable_runtime_is_one_summary_line",
                                      "test_off_a_terminal_each_finished_case_is_one_plain_line_and_errors_point_at_their_log",
                                      "test_on_a_terminal_a_live_line_shows_the_case_i_of_n_and_elapsed"),
    "tests/runtimes/test_seed_runtimes.py": ("test_runs_mlp_per_shape_with_setup_recorded_outside_the_timed_call",
                                             "test_torch_compile_records_its_mode_and_one_compile_per_shape"),
    "tests/test_cli.py": ("test_commands_piped_into_a_reader_that_quits_end_quietly",
                          "test_ctrl_c_at_any_moment_of_conform_is_exit_130_without_a_traceback",
                          "test_pytest_benchmark_compare_reads_our_json",
                          "test_report_merges_runs_from_two_thread_settings_side_by_side",
                          "test_report_rerenders_and_rejects_bad_files", "test_report_with_a_baseline_shows_verdicts",
                          "test_run_twice_reuses_the_onnx_export_and_writes_every_output"),
    "tests/test_feeds.py": ("test_a_sample_rate_model_fails_naming_the_input_then_runs_with_input_value_and_feeds",
                            "test_a_torch_factory_runs_on_feeds_with_their_sequence_length_and_labels",
                            "test_bad_feeds_and_overrides_are_one_line_from_run_and_plain_pytest"),
    "tests/test_model_files.py": ("test_a_run_mixing_bad_models_with_good_ones_writes_the_good_results",
                                  "test_export_that_fails_is_an_error_row_with_the_cause",
                                  "test_model_twice_with_models_runs_and_a_refused_file_is_an_error_row"),
    "tests/test_model_inputs.py": (
        "test_a_bert_style_encoder_with_a_large_vocabulary_runs_with_no_feeds_and_no_options",
        "test_a_real_bert_encoder_with_token_types_and_a_4000_row_vocabulary_runs_with_no_options"),
    "tests/test_plugin.py": ("test_drift_failure_sets_the_exit_status_and_shows_figures",
                             "test_passing_matrix_writes_results_and_exits_zero",
                             "test_plugin_is_inert_without_the_case_fixture", "test_skips_carry_their_reasons"),
    "tests/variants/test_variants.py": ("test_bad_variants_option_is_one_line",
                                        "test_transformer_fusion_fuses_bert_and_refuses_a_cnn",
                                        "test_variant_cases_are_judged_against_the_models_own_reference"),
}
ROOT_DIR = TESTS_DIR.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: the slower end-to-end tier (pytest tests -m e2e; CI runs it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the end-to-end tier; leave it out unless -m or -k chooses tests or tests are named by node id."""
    for item in items:
        try:
            path = Path(str(item.fspath)).resolve().relative_to(ROOT_DIR).as_posix()
        except ValueError:
            continue
        name = getattr(item, "originalname", None) or item.name.split("[")[0]
        if name in E2E_TIER.get(path, ()) or item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.e2e)
    if config.option.markexpr or config.option.keyword or any("::" in str(a) for a in config.args):
        return
    kept = [i for i in items if not i.get_closest_marker("e2e")]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("e2e")])
        items[:] = kept


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Environment for a harness subprocess that knows the fake runtimes and uses a private cache."""
    monkeypatch.setenv("HARNESS_PLUGINS", "fakes")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return dict(os.environ)


@pytest.fixture(scope="session")
def fakes():
    import fakes as module
    from harness import plugins

    plugins.load_plugins()
    return module


@pytest.fixture(scope="session", autouse=True)
def _registries() -> None:
    """The zoo and plugin runtimes registered, as the CLI, the pytest plugin and a worker do before they
    resolve names (the registries themselves never load plugins)."""
    from harness import plugins

    plugins.load_plugins()
