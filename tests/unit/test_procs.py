"""trends.stack.procs: a process counts as alive until its last thread is gone (it holds the sockets until then);
`down`'s order of stops."""

from __future__ import annotations

import subprocess
import sys
import time

from trends.stack import procs

# The main thread exits through pthread_exit while another thread sleeps on: the leader shows as a zombie,
# yet the listening socket stays open until the sleeping thread ends.
_LEADER_EXITS_FIRST = """
import ctypes, socket, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True)
threading.Thread(target=time.sleep, args=(2,)).start()
ctypes.CDLL(None).pthread_exit(None)
"""


def _leader_state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_process_whose_leader_exited_first_is_alive_while_its_socket_answers():
    child = subprocess.Popen([sys.executable, "-c", _LEADER_EXITS_FIRST], stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        deadline = time.monotonic() + 5
        while _leader_state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _leader_state(child.pid) == "Z"
        assert procs.port_open("127.0.0.1", port)
        assert procs.pid_alive(child.pid)
        child.wait(timeout=10)
        assert not procs.pid_alive(child.pid)
        assert not procs.port_open("127.0.0.1", port)
    finally:
        child.kill()
        child.wait()


def test_an_unknown_process_is_not_alive():
    assert not procs.pid_alive(2**22 + 1)  # above the kernel's largest pid: no such process


def test_down_stops_the_layers_newest_first_then_the_infrastructure():
    from trends.stack.manager import stop_tiers

    stack = ["redis", "kafka", "speed-workers", "speed-materializer", "api", "airflow"]
    assert stop_tiers(stack, {"redis", "kafka"}) == [
        ["airflow", "api", "speed-materializer", "speed-workers"], ["kafka", "redis"]]
    assert stop_tiers(["redis", "kafka"], {"redis", "kafka"}) == [["kafka", "redis"]]
    assert stop_tiers(["api"], {"redis", "kafka"}) == [["api"]]
