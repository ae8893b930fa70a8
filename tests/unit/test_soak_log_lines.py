"""bench/soak.py's rules: error lines (a batch job stopped by `trends down` is expected only at the stop), kills,
CPU per role."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _soak():
    sys.path.insert(0, str(BENCH))  # soak imports speed_meters from bench/, as when it runs as a script
    try:
        spec = importlib.util.spec_from_file_location("soak_under_test", BENCH / "soak.py")
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def _task_line(code: str, stamp: str) -> str:
    return ('{"timestamp":"' + stamp + '","level":"error","event":"Task failed with exception","error_detail":'
            '[{"exc_type":"ServiceError","exc_value":"spark-submit archive failed (exit code ' + code + '):\\n"}]}')


def test_a_spark_submit_stopped_by_sigterm_is_expected_only_once_the_stack_stops():
    soak = _soak()
    stopping_ms = 1_796_322_000_000  # 2026-12-03T18:20:00Z
    for code in ("143", "-15"):
        at_stop, before = _task_line(code, "2026-12-03T18:27:22.8Z"), _task_line(code, "2026-12-03T18:10:00Z")
        assert soak.is_error(at_stop)
        assert soak.expected(at_stop, stopping_ms) is not None, code
        assert soak.expected(before, stopping_ms) is None, code
    assert soak.expected(_task_line("1", "2026-12-03T18:27:22.8Z"), stopping_ms) is None


def test_a_task_that_cannot_report_to_its_stopped_supervisor_is_expected_only_once_the_stack_stops():
    soak = _soak()
    stopping_ms = 1_796_322_000_000  # 2026-12-03T18:20:00Z

    def line(stamp: str) -> str:  # as Airflow 3 wrote it in a CI run's soak
        return ('{"timestamp":"' + stamp + '","level":"error","event":"Failed to report terminal task state to '
                'supervisor","state":"up_for_retry","task_id":"archive","logger":"task"}')

    assert soak.is_error(line("2026-12-03T18:20:37.7Z"))
    assert soak.expected(line("2026-12-03T18:20:37.7Z"), stopping_ms) is not None
    assert soak.expected(line("2026-12-03T18:10:00Z"), stopping_ms) is None


def test_a_spark_start_interrupted_by_the_stop_is_expected_only_once_the_stack_stops():
    soak = _soak()
    stopping_ms = 1_796_322_000_000  # 2026-12-03T18:20:00Z
    events = ("26/12/05 05:05:34 ERROR SparkContext: Error initializing SparkContext.",  # as a CI soak logged them
              "java.nio.channels.ClosedByInterruptException",
              "26/12/05 05:05:34 ERROR Utils: Uncaught exception in thread Thread-5")

    def line(stamp: str, event: str) -> str:
        return '{"timestamp":"' + stamp + '","level":"error","event":"' + event + '","logger":"task.stderr"}'

    for event in events:
        assert soak.is_error(line("2026-12-03T18:20:01.2Z", event))
        assert soak.expected(line("2026-12-03T18:20:01.2Z", event), stopping_ms) is not None, event
        assert soak.expected(line("2026-12-03T18:19:59Z", event), stopping_ms) is None, event
    other = line("2026-12-03T18:20:01.2Z", "26/12/05 05:05:34 ERROR Executor: Exception in task 0.0")
    assert soak.expected(other, stopping_ms) is None


def test_a_task_started_while_the_stop_takes_the_api_server_is_expected_only_once_the_stack_stops():
    soak = _soak()
    stopping_ms = 1_796_322_000_000  # 2026-12-03T18:20:00Z
    line = ("scheduler  | {stamp} [error    ] Workload execution failed.     "  # as a CI soak's airflow.log had it
            "[airflow.executors.local_executor.LocalExecutor] loc=local_executor.py:110 workload_type=ExecuteTask")
    at_stop, before = line.format(stamp="2026-12-03T18:20:01.2Z"), line.format(stamp="2026-12-03T18:19:00Z")
    assert soak.is_error(at_stop)
    assert soak.expected(at_stop, stopping_ms) is not None
    assert soak.expected(before, stopping_ms) is None
    traceback = "scheduler  | Traceback (most recent call last):"  # the next line, unstamped
    assert soak.is_error(traceback) and soak.expected(traceback, stopping_ms) is not None


def test_a_short_soak_kills_once_a_third_in_and_measures_memory_after_its_rebalances():
    soak = _soak()
    short = soak.SoakConfig(minutes=2)
    assert short.kill_times() == [40.0] and short.warmup() == 40.0 + soak.SETTLE_S
    long = soak.SoakConfig(minutes=30)
    assert long.kill_times() == [300.0, 600.0, 900.0, 1200.0, 1500.0]
    assert long.warmup() == 300.0 + soak.SETTLE_S
    # every kill leaves SETTLE_S for its rebalances before the load ends
    assert soak.SoakConfig(minutes=15, kill_every_s=100).kill_times()[-1] == 800.0


def test_cpu_is_counted_per_role_across_a_killed_workers_replacements():
    soak = _soak()
    tick = __import__("os").sysconf("SC_CLK_TCK")

    def at(s: float, worker: tuple[int, int], api: int, harness: int, machine: int):
        return soak.Sample(s, {}, None, {"speed-0": worker, "api": (7, api)}, harness, machine)

    # 10 s: the worker used 2 s on its first PID (killed) and 3 s on its replacement, the API 5 s, the harness
    # 4 s, the machine 15 s: 1 s of it by nothing sampled (a Spark job, the kernel)
    samples = [at(0, (1, 0), 0, 0, 0), at(4, (1, 2 * tick), 2 * tick, tick, 6 * tick),
               at(6, (2, 10 * tick), 3 * tick, 2 * tick, 9 * tick),
               at(10, (2, 13 * tick), 5 * tick, 4 * tick, 15 * tick)]
    assert soak.cpu_cores(samples) == {"machine": 1.5, "speed-0": 0.5, "api": 0.5, "harness": 0.4, "other": 0.1}
    assert soak.cpu_cores(samples[:1]) == {}


def test_kafkas_slow_controller_notice_is_expected_below_ten_seconds_only():
    soak = _soak()

    def line(ms: int) -> str:  # as the local broker wrote it in a 30-minute soak
        return (f"[2026-12-04 21:26:11,118] ERROR [QuorumController id=1] Exceptionally slow controller event "
                f"writeNoOpRecord(460962416) took {ms} ms. (org.apache.kafka.controller.EventPerformanceMonitor)")

    assert soak.is_error(line(2384))
    assert soak.expected(line(2384), 1_796_322_000_000) is not None
    assert soak.expected(line(9999), 1_796_322_000_000) is not None
    assert soak.expected(line(10250), 1_796_322_000_000) is None
