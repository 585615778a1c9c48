"""A hung server is found and relaunched (process.py S4/S5); start-up timeouts count toward the fallback (S1)."""

from __future__ import annotations

import asyncio
import signal

from sglang_double_helpers import run
from supervisor_helpers import (
    SERVER, FakeProcess, alive, fast_supervision, http_health_generate, http_healthy, policy, script_launcher,
    supervisor, wait_for,
)  # fmt: skip


def test_rule_s4_consecutive_health_generate_misses_are_a_hang(tmp_path):
    processes: list[FakeProcess] = []

    async def launcher(command, env, log_path):
        processes.append(FakeProcess())
        return processes[-1]

    async def never_answers(base_url: str, timeout_s: float) -> bool:
        await asyncio.Event().wait()  # SGLang's scheduler is stuck: no answer at all
        return True

    async def main():
        sup = supervisor(tmp_path, launcher, health_check=never_answers, policy=policy(fallback_after_crashes=5),
                         supervision=fast_supervision(hang_after_misses=3))  # fmt: skip
        await sup.start()
        await wait_for(lambda: sup.num_launches == 2 and sup.state == "ready", what="the relaunch after a hang")
        result = (sup.num_hangs, sup.num_crashes, sup.last_failure, processes[0].signals, sup.drafter_active)
        await sup.stop()
        return result

    num_hangs, num_crashes, last_failure, signals, drafter_active = run(main())
    assert (num_hangs, num_crashes) == (1, 1)  # a hang is a crash for the policy: 1 < 5, drafter kept
    assert last_failure == "hang: 3 /health_generate checks without a 200 within 0.2 s"
    assert signals == [signal.SIGTERM] and drafter_active is True


def test_rule_s4_misses_must_be_consecutive(tmp_path):
    # answers: miss, miss, 200, miss, miss, 200, ... : never 3 misses in a row, so never a hang
    answers = iter([False, False, True] * 4)
    asked = asyncio.Event()

    async def launcher(command, env, log_path):
        return FakeProcess()

    async def health_check(base_url: str, timeout_s: float) -> bool:
        answer = next(answers, None)
        if answer is None:
            asked.set()
            await asyncio.Event().wait()  # the test ends before this would count as misses
        return answer

    async def main():
        sup = supervisor(tmp_path, launcher, health_check=health_check, supervision=fast_supervision())
        await sup.start()
        await asyncio.wait_for(asked.wait(), 10)
        result = (sup.num_hangs, sup.num_launches)
        await sup.stop()
        return result

    assert run(main()) == (0, 1)


def test_rule_s1_startup_timeouts_count_toward_the_fallback(tmp_path):
    # The clock moves 100 s per reading; startup_timeout_s is 250 s: a drafter launch never answers /health
    # and times out; 2 timeouts with the drafter >= fallback_after_crashes (2): the third launch has no drafter.
    now = [0.0]

    def clock() -> float:
        now[0] += 100.0
        return now[0]

    launched: list[bool] = []
    processes: list[FakeProcess] = []

    async def launcher(command, env, log_path):
        launched.append("--draft" in command)
        processes.append(FakeProcess())
        return processes[-1]

    async def probe(base_url: str) -> bool:
        return not launched[-1]  # only the autoregressive server comes up

    async def main():
        sup = supervisor(tmp_path, launcher, probe=probe, clock=clock, startup_timeout_s=250.0,
                         policy=policy(crash_window_s=10_000.0, fallback_after_crashes=2))  # fmt: skip
        await sup.start()
        result = sup.status(), sup.fallback_reason
        await sup.stop()
        return result

    status, reason = run(main())
    assert launched == [True, True, False] and status.num_crashes == 2 and status.state == "ready"
    assert reason == ("2 crashes with the drafter on within the crash window "
                      "(last: start-up timeout: no /health 200 within 250 s)")
    assert status.path == "autoregressive-fallback"
    assert [p.signals[:1] for p in processes[:2]] == [[signal.SIGTERM], [signal.SIGTERM]]  # timed-out groups ended


def test_hung_real_server_is_killed_with_its_group_and_relaunched(tmp_path):
    # supervisor_server.py's first launch never answers /health_generate and has forked a child; the relaunch
    # answers. After the relaunch the first launch's child is gone.
    pids = tmp_path / "children.txt"
    env = {"SUPERVISOR_SERVER_HANG_ONCE": str(tmp_path / "hung-once"), "SUPERVISOR_SERVER_CHILD_PIDS": str(pids)}

    async def main():
        sup = supervisor(tmp_path, script_launcher(SERVER, env), probe=http_healthy, health_check=http_health_generate,
                         supervision=fast_supervision(), policy=policy(fallback_after_crashes=5))  # fmt: skip
        await sup.start()
        await wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 1, what="the first child")
        first_child = int(pids.read_text().split()[0])
        await wait_for(lambda: sup.num_launches == 2 and sup.state == "ready", what="the relaunch after the hang")
        result = (sup.num_hangs, sup.num_crashes, alive(first_child))
        await asyncio.sleep(0.5)  # the relaunched server keeps answering: no second hang
        result += (sup.num_hangs, sup.num_launches)
        await sup.stop()
        return result

    assert run(main()) == (1, 1, False, 1, 2)
