"""EngineReplica's methods that Ray calls run on the replica's event loop (replica.py's docstring).

Ray Serve 2.60 runs a replica's plain `def` methods in worker threads (RAY_SERVE_RUN_SYNC_IN_THREADPOOL,
on by default) and awaits `async def` ones on the replica's loop, where the engine lives.
"""

import asyncio
import inspect
from pathlib import Path

from ray_dspine.config_io import load_app_configs
from ray_dspine.engines.protocol import GenerateRequest
from ray_dspine.serve.replica import EngineReplica

SIM_YAML = Path(__file__).resolve().parents[2] / "clusters" / "sim.yaml"
CALLED_BY_RAY = (
    "record_routing_stats", "record_autoscaling_stats", "load", "describe", "reconfigure", "generate", "check_health"
)


def dspine_pool():
    (_name, config), = load_app_configs(SIM_YAML)
    pool = next(p for p in config.pools if p.name == "dspine")
    return pool.model_copy(update={"engine": pool.engine.model_copy(update={"time_scale": 0.01})})


def test_rule_every_method_ray_calls_runs_on_the_event_loop():
    for name in CALLED_BY_RAY:
        method = getattr(EngineReplica, name)
        assert inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method), name


def test_routing_stats_while_a_stream_runs_come_from_the_engine_on_the_loop():
    async def main():
        replica = EngineReplica.__new__(EngineReplica)
        await replica.__init__(dspine_pool())
        request = GenerateRequest(
            request_id="r1", prompt="hello " * 400, max_tokens=400, estimated_prompt_tokens=600, pool="dspine"
        )
        stream = replica.generate(request)
        first = await stream.__anext__()
        stats = await replica.record_routing_stats()
        rest = [chunk async for chunk in stream]
        after = await replica.record_routing_stats()
        await replica.engine.stop()
        return first, stats, rest, after

    first, stats, rest, after = asyncio.run(main())
    assert first.replica == "local" and first.num_tokens == 1
    assert stats["num_running"] == 1 and stats["healthy"] and "reported_at_s" in stats
    # the running request holds its prompt (600) and, as SGLang allocates, its output so far plus the next
    # step's reservation of 2 x 16 draft tokens (sim.yaml's pool), capped at max_tokens (400): between
    # 600 + 32 = 632 and 600 + 400 = 1000 KV tokens, however many steps ran before the report
    held = stats["total_kv_tokens"] - stats["free_kv_tokens"]
    assert 632 <= held <= 1000
    assert rest[-1].finish_reason == "length" and sum(c.num_tokens for c in rest) == 399
    assert after["num_running"] == 0


def test_first_chunk_carries_the_seconds_since_the_replica_received_the_request():
    # The replica's clock reads 100.0 when the request arrives and 102.5 when the first chunk comes, so
    # the first chunk's replica_s (Server-Timing `replica`) is 2.5 s; later chunks carry none.
    readings = iter([100.0, 102.5] + [103.0] * 1000)

    async def main():
        replica = EngineReplica.__new__(EngineReplica)
        await replica.__init__(dspine_pool())
        replica.clock = lambda: next(readings)
        request = GenerateRequest(
            request_id="r1", prompt="hello", max_tokens=3, estimated_prompt_tokens=2, pool="dspine"
        )
        chunks = [chunk async for chunk in replica.generate(request)]
        await replica.engine.stop()
        return chunks

    chunks = asyncio.run(main())
    assert chunks[0].replica_s == 2.5 and chunks[0].replica == "local"
    assert all(c.replica_s is None for c in chunks[1:])


def test_stream_batching_merges_after_the_stamped_first_chunk():
    # With a 1-second interval and a stream that ends within it (400 tokens at 1% of H200 time, about
    # 20 ms), the replica passes the stamped first flush at once (the first chunk, merged with any that
    # came in the same instant) and the rest of the 400 tokens as one chunk when the stream ends
    # (stream_batching.py rules first and end).
    async def main():
        pool = dspine_pool()
        deployment = pool.deployment.model_copy(update={"stream_batch_interval_ms": 1000.0})
        pool = pool.model_copy(update={"deployment": deployment})
        replica = EngineReplica.__new__(EngineReplica)
        await replica.__init__(pool)
        request = GenerateRequest(
            request_id="r1", prompt="hello " * 400, max_tokens=400, estimated_prompt_tokens=600, pool="dspine"
        )
        chunks = [chunk async for chunk in replica.generate(request)]
        await replica.engine.stop()
        return chunks

    chunks = asyncio.run(main())
    assert [c.finish_reason for c in chunks] == [None, "length"]
    assert chunks[0].num_tokens >= 1 and chunks[0].num_tokens + chunks[1].num_tokens == 400
    assert chunks[0].replica == "local" and chunks[0].replica_s is not None and chunks[1].replica_s is None
    assert chunks[1].usage.completion_tokens == 400


def test_engine_summary_names_the_engine_and_what_its_args_carry():
    from ray_dspine.serve.replica import engine_summary

    embedded = {"engine": "embedded", "args": {"dtype": "bf16", "row_exact": True, "speculative": True}}
    assert engine_summary(embedded) == "embedded, dtype bf16, row_exact"
    assert engine_summary({"engine": "embedded", "args": {"dtype": "fp32", "row_exact": False}}) == "embedded, dtype fp32"
    assert engine_summary({"engine": "simulated", "config": {}}) == "simulated"


def test_a_started_replica_logs_its_engine_to_serves_logger():
    import logging

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    serve_logger = logging.getLogger("ray.serve")
    handler, level = Keep(), serve_logger.level
    serve_logger.addHandler(handler)
    serve_logger.setLevel(logging.INFO)

    async def main():
        replica = EngineReplica.__new__(EngineReplica)
        await replica.__init__(dspine_pool())
        await replica.engine.stop()

    try:
        asyncio.run(main())
    finally:
        serve_logger.removeHandler(handler)
        serve_logger.setLevel(level)
    assert [r.getMessage() for r in records] == ["pool dspine replica local: simulated"]
