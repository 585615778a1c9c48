"""The drill's accounting against a fake stack (fake_stack.py) that misbehaves in known, countable ways."""

import asyncio
import json

import pytest
from fake_stack import LIMIT, FakeStack

from ray_dspine.drill.cli import drill
from ray_dspine.drill.kill import ReplicaActor
from ray_dspine.drill.rss import ProcessRss, RssSnapshot
from ray_dspine.drill.settings import DrillSettings
from ray_dspine.drill.soak import arrival_times

MIB = 2**20


@pytest.fixture
def stacks():
    started = []

    def start(**kwargs):
        started.append(FakeStack(**kwargs).start())
        return started[-1]

    yield start
    for fake in started:
        fake.stop()


class FakeKiller:
    """Stands in for Ray: one replica of the pool; killing it ends the fake's streams."""

    def __init__(self, fake):
        self.fake = fake
        self.killed = []

    def find(self, pool):
        return [ReplicaActor(name="r1", namespace="serve", class_name=f"ServeReplica:dspine:pool-{pool}", pid=0,
                             node_id="n")]

    def kill(self, replica):
        self.killed.append(replica.class_name)
        self.fake.kill()
        return "fake"


def _rss(*totals_mib):
    """An rss reader returning one single-process snapshot per call, of the given sizes in MiB."""
    snaps = iter(totals_mib)
    return lambda: RssSnapshot(session="session_x", processes=[ProcessRss(pid=1, command="raylet",
                                                                          rss_bytes=int(next(snaps) * MIB))])


def _run(tmp_path, fake, rss=lambda: None, killer=None, **settings):
    receipt = tmp_path / "receipt.json"
    s = DrillSettings(endpoint=fake.url, client_timeout_s=1.0, max_request_bytes=LIMIT, json_path=receipt, **settings)
    code = asyncio.run(drill(s, command_line=["ray-dspine", "drill"], rss=rss, killer=killer))
    data = json.loads(receipt.read_text())
    return code, data, {r["name"]: r for r in data["scenarios"]}


def test_misbehaving_stack_is_counted_exactly(tmp_path, stacks):
    # One corpus case answers 500 text/plain, one hangs; the 2nd stream is cut without [DONE]; the burst gets
    # 6 x 200, 3 x 429 (with Retry-After) and 1 x 503 (without).
    fake = stacks(misbehave={"unknown model": "500_text", "missing prompt": "hang"}, cut_streams={2},
                  burst_plan=["200"] * 6 + ["429"] * 3 + ["503"])
    code, receipt, by = _run(tmp_path, fake, only=["corpus", "concurrency", "burst"], concurrency=4, burst=10)
    assert code == 1 and receipt["passed"] is False
    corpus = by["corpus"]
    # 560 cases + the normal request; the hung case has no answer; the 500 is both 5xx and not an OpenAI error.
    assert (corpus["sent"], corpus["answered"], corpus["hung"], corpus["lost"]) == (561, 560, 1, 0)
    assert corpus["failed"] == {"5xx": 1}
    f = corpus["figures"]
    # The corpus expects 48 x 200; "unknown model" (404) became 500 and "missing prompt" (400) hung: 560-48-2 = 510 4xx.
    assert (f["num_2xx"], f["num_4xx"], f["num_5xx"], f["num_non_json"], f["num_hung"]) == (48, 510, 1, 1, 1)
    assert f["normal_request"]["status"] == 200
    assert corpus["passed"] is False and corpus["reason"] == "1 case(s) 5xx; 1 case(s) hung"
    hung = [c for c in f["cases"] if c["hung"]]
    assert [c["name"] for c in hung] == ["missing prompt"] and hung[0]["status"] is None

    conc = by["concurrency"]  # stream 2 of 4 ended without [DONE]: lost, not failed
    assert (conc["sent"], conc["answered"], conc["lost"], conc["hung"], conc["failed"]) == (4, 3, 1, 0, {})
    assert conc["passed"] is False and conc["reason"] == "1 of 4 streams not answered correctly"

    burst = by["burst"]
    f = burst["figures"]
    assert (f["num_200"], f["num_429"], f["num_503"], f["num_refused_with_retry_after"]) == (6, 3, 1, 3)
    assert f["num_client_timeouts"] == 0 and f["other"] == {}
    assert burst["passed"] is False and burst["reason"] == "1 of 4 429/503 without Retry-After"
    assert fake.deadline_headers == ["1000"] * 10  # client timeout 1 s -> 1000 ms on every burst request
    skipped = {n: r["reason"] for n, r in by.items() if r["passed"] is None}
    assert skipped == {"disconnect": "not in --only", "kill": "needs --ray-address", "soak": "not in --only"}


def test_well_behaved_stack_passes_every_scenario(tmp_path, stacks, capsys):
    fake = stacks()
    killer = FakeKiller(fake)
    code, receipt, by = _run(tmp_path, fake, rss=_rss(100, 100, 104, 104), killer=killer, ray_address="fake:1",
                             concurrency=4, burst=10, disconnects=3, kill_streams=4, soak_minutes=0.02,
                             api_key="not-in-receipt")
    assert code == 0 and receipt["passed"] is True
    assert list(by) == ["corpus", "concurrency", "burst", "disconnect", "kill", "soak"]
    assert all(r["passed"] for r in by.values()), {n: r["reason"] for n, r in by.items()}
    assert "not-in-receipt" not in json.dumps(receipt)
    assert receipt["git"]["commit"] and receipt["command_line"] == ["ray-dspine", "drill"]
    assert by["corpus"]["figures"]["num_2xx"] == 48 and by["corpus"]["failed"] == {}
    capacity = by["concurrency"]["figures"]["capacity_completions_per_s"]
    assert capacity > 0
    assert by["burst"]["figures"]["num_200"] == 10
    d = by["disconnect"]["figures"]
    assert d["num_closed"] == 3 and d["time_to_recover_capacity_s"] is not None
    k = by["kill"]["figures"]
    assert killer.killed == ["ServeReplica:dspine:pool-spec"]
    assert k["num_affected"] == 4 and by["kill"]["lost"] == 0
    assert all(r["error_event"] and r["finish_reasons"] == ["error"] and r["done"] for r in k["streams"])
    # The fake's pool answers 503 for 0.6 s after the kill, then serves: the probe (1 s apart) sees it at ~1 s.
    assert 0.6 <= k["pool_serves_after_s"] < 3.0
    assert k["ready_not_200_after_s"] < 0.6 <= k["ready_200_again_after_s"]
    soak = by["soak"]["figures"]
    # Same rate, duration and seed -> the same Poisson arrivals the soak sent.
    assert soak["num_arrivals"] == len(arrival_times(soak["rate_per_s"], soak["duration_s"], 0)) == by["soak"]["sent"]
    assert soak["rss_growth_percent"] == pytest.approx(4.0)  # (104 - 100) / 100
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:6] == ["scenario", "sent", "answered", "failed", "hung", "lost"]
    assert table.count("PASS") == 6 and "skipped" not in table


def test_kill_counts_a_stream_that_breaks_off_as_lost(tmp_path, stacks):
    fake = stacks(cut_on_kill={3})  # stream 3 drops its connection instead of sending the error event
    code, _, by = _run(tmp_path, fake, killer=FakeKiller(fake), ray_address="fake:1", only=["kill"], kill_streams=4)
    kill = by["kill"]
    assert code == 1 and kill["lost"] == 1 and kill["figures"]["num_affected"] == 4
    assert kill["reason"] == "1 stream(s) lost"


def test_kill_counts_a_queued_stream_left_without_an_answer_as_lost(tmp_path, stacks):
    fake = stacks(held_streams={4})  # stream 4 waits in a queue and is never answered before the client's 1 s
    code, _, by = _run(tmp_path, fake, killer=FakeKiller(fake), ray_address="fake:1", only=["kill"], kill_streams=4)
    kill = by["kill"]
    assert code == 1 and kill["figures"]["num_affected"] == 3 and kill["hung"] == 1 and kill["lost"] == 1
    assert kill["reason"] == "1 stream(s) lost"
    # every stream told the server how long its client waits: the 1 s client timeout
    assert fake.stream_deadline_headers == ["1000"] * 4


def test_soak_fails_on_rss_growth(tmp_path, stacks):
    fake = stacks()
    # rss is read at the drill's start, the soak's start, the soak's end, the drill's end: 100 -> 106 MiB is 6%.
    code, receipt, by = _run(tmp_path, fake, rss=_rss(100, 100, 106, 106), only=["concurrency", "soak"],
                             concurrency=2, soak_minutes=0.01)
    assert code == 1
    assert by["soak"]["reason"] == "RSS grew 6.0% (limit 5%)"
    assert receipt["rss_before"]["processes"][0]["rss_bytes"] == 100 * MIB
    assert receipt["rss_after"]["processes"][0]["rss_bytes"] == 106 * MIB


def test_rule_poisson_arrivals():
    times = arrival_times(100.0, 100.0, seed=7)
    assert times == arrival_times(100.0, 100.0, seed=7) and times != arrival_times(100.0, 100.0, seed=8)
    assert times[0] == 0.0 and all(a < b for a, b in zip(times, times[1:])) and times[-1] < 100.0
    # ~ rate x duration = 10,000 arrivals; a Poisson count's sd is 100, so 4 sd either side.
    assert 9_600 <= len(times) <= 10_400


def test_kill_fails_cleanly_when_ray_cannot_be_reached(tmp_path, stacks):
    class Unreachable(FakeKiller):
        def find(self, pool):
            raise ConnectionError("GCS at fake:1 did not answer")

    fake = stacks()
    code, _, by = _run(tmp_path, fake, killer=Unreachable(fake), ray_address="fake:1", only=["kill", "burst"], burst=2)
    assert code == 1
    assert by["kill"]["reason"] == "cannot list the replicas through Ray: ConnectionError: GCS at fake:1 did not answer"
    assert by["burst"]["passed"] is True  # the scenarios after it still ran


@pytest.mark.parametrize("recover_within_s", [60.0, 1.0])
def test_disconnect_times_the_recovery_of_a_stack_that_keeps_abandoned_work(tmp_path, stacks, recover_within_s):
    # The fake keeps generating for clients that hung up: 512 tokens x 4 ms = 2 s at least (event-loop overhead
    # adds some); until then each normal request waits 0.5 s, past the baseline limit of baseline + 0.2 s.
    fake = stacks(chunk_delay_s=0.004, busy_delay_s=0.5)
    code, _, by = _run(tmp_path, fake, only=["disconnect"], disconnects=3, recover_within_s=recover_within_s)
    d = by["disconnect"]
    assert d["figures"]["num_closed"] == 3
    if recover_within_s == 60.0:
        assert code == 0 and 1.5 <= d["figures"]["time_to_recover_capacity_s"] < 6.0
        assert d["figures"]["num_probes"] >= 3  # 0.5 s + 0.2 s gap per slow probe over >= 1.5 s
    else:
        assert code == 1 and d["figures"]["time_to_recover_capacity_s"] is None
        assert d["reason"] == "not back to baseline latency within 1 s"
