"""The whole process group goes on stop and before a relaunch, so no orphan keeps GPU memory (process_group.py
G1-G4, process.py S5). The server is a real process (supervisor_server.py) that forks a child into its group."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ray_dspine.engines.sglang.process_group import group_members, launch_subprocess, terminate_group

from sglang_double_helpers import run
from supervisor_helpers import (
    SERVER, alive, fast_supervision, http_healthy, policy, script_launcher, supervisor, wait_for,
)  # fmt: skip


def _children(pids: Path) -> list[int]:
    return [int(pid) for pid in pids.read_text().split()] if pids.exists() else []


def test_rule_g1_g3_the_server_leads_a_group_its_children_join(tmp_path):
    pids = tmp_path / "children.txt"
    env = {**os.environ, "SUPERVISOR_SERVER_CHILD_PIDS": str(pids), "SUPERVISOR_SERVER_CHILD_IGNORES_TERM": "1"}

    async def main():
        process = await launch_subprocess([sys.executable, str(SERVER), "--port", "0"], env, tmp_path / "server.log")
        await wait_for(lambda: len(_children(pids)) == 1, what="the child")
        members = sorted(group_members(process.pid))
        # G4: the child ignores SIGTERM; the group is gone only after SIGKILL, 0.3 s of grace later
        await terminate_group(process, grace_s=0.3)
        return process.pid, members, sorted(group_members(process.pid)), alive(_children(pids)[0])

    leader, members, after, child_alive = run(main())
    assert members == sorted([leader, _children(pids)[0]])  # G1: the fork joined the leader's group
    assert os.getpgid(os.getpid()) != leader  # the test runner is not in it
    assert after == [] and child_alive is False
    assert "=== launch: " in (tmp_path / "server.log").read_text().splitlines()[0]


def test_stop_ends_the_group_child_included(tmp_path):
    pids = tmp_path / "children.txt"
    env = {"SUPERVISOR_SERVER_CHILD_PIDS": str(pids), "SUPERVISOR_SERVER_CHILD_IGNORES_TERM": "1"}

    async def main():
        sup = supervisor(tmp_path, script_launcher(SERVER, env), probe=http_healthy, stop_grace_s=0.3,
                         supervision=fast_supervision())  # fmt: skip
        await sup.start()
        await wait_for(lambda: len(_children(pids)) == 1, what="the child")
        child = _children(pids)[0]
        before = alive(child)
        await sup.stop()
        return before, alive(child), sup.state

    assert run(main()) == (True, False, "stopped")


def test_a_crashed_leaders_orphan_is_killed_before_the_relaunch(tmp_path):
    # The first launch exits (code 1) 0.3 s after its port opens, leaving its child (which ignores SIGTERM).
    pids = tmp_path / "children.txt"
    env = {"SUPERVISOR_SERVER_CHILD_PIDS": str(pids), "SUPERVISOR_SERVER_CHILD_IGNORES_TERM": "1",
           "SUPERVISOR_SERVER_EXIT_ONCE": str(tmp_path / "exit-once"), "SUPERVISOR_SERVER_EXIT_AFTER_S": "0.3"}
    launched_children: list[tuple[int, bool]] = []

    async def main():
        launch = script_launcher(SERVER, env)

        async def launcher(command, environment, log_path):
            # before each launch: is the previous launch's child still alive?
            launched_children.extend((pid, alive(pid)) for pid in _children(pids)[len(launched_children):])
            return await launch(command, environment, log_path)

        sup = supervisor(tmp_path, launcher, probe=http_healthy, stop_grace_s=0.3, supervision=fast_supervision(),
                         policy=policy(fallback_after_crashes=5))  # fmt: skip
        await sup.start()
        await wait_for(lambda: sup.num_launches == 2 and sup.state == "ready", what="the relaunch")
        await wait_for(lambda: len(_children(pids)) == 2, what="the second child")
        first, second = _children(pids)
        result = (sup.num_crashes, sup.last_failure, alive(first), alive(second))
        await sup.stop()
        return result + (alive(second),)

    num_crashes, last_failure, first_alive, second_alive, second_after_stop = run(main())
    assert (num_crashes, last_failure) == (1, "exit code 1")
    assert launched_children[0][1] is False  # the orphan was gone before the second launch started
    assert (first_alive, second_alive, second_after_stop) == (False, True, False)
