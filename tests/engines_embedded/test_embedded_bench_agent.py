"""`bench engine`'s agent scenario on a tiny model and a small tau-bench-format file written here."""

import asyncio
import json
from types import SimpleNamespace

from ray_dspine.bench import engine_bench
from ray_dspine.bench.engine_agent import load_conversations, run_agent_scenario
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig

POLICY = "You are an airline agent. Follow the policy: verify the user, then act. " * 2  # 146 characters


def write_trace(folder, runs=3):
    traj = lambda i: [  # noqa: E731
        {"role": "system", "content": POLICY},
        {"role": "user", "content": f"I am user {i}, change my flight."},
        {"role": "assistant", "content": "Sure, your booking id?"},
        {"role": "user", "content": f"It is ABC{i}."},
        {"role": "assistant", "content": "Done."},
    ]
    data = [{"task_id": i, "trial": 0, "reward": 1.0, "info": {}, "traj": traj(i)} for i in range(runs)]
    (folder / "tau-bench").mkdir()
    (folder / "tau-bench" / "gpt-4o-airline.json").write_text(json.dumps(data))


def test_agent_scenario_reports_each_cell_with_and_without_reuse(tiny, tmp_path):
    write_trace(tmp_path)
    conversations = load_conversations(3, 2, traces_dir=tmp_path)
    assert [len(c) for c in conversations] == [2, 2, 2]
    assert len(conversations[0][1].messages) == 4  # turn 2 carries turn 1 and its recorded answer
    base = EmbeddedEngineConfig(dtype="fp32", context_length_tokens=512, kv_budget_tokens=4096, prefix_block_tokens=8)
    result = asyncio.run(run_agent_scenario(tiny, base, conversations, (1, 2), 4, lambda _m: None))
    assert set(result["cells"]) == {"c1_reuse", "c1_no_reuse", "c2_reuse", "c2_no_reuse"}
    for name, cell in result["cells"].items():
        assert cell["requests"] == 6 and cell["refused"] == 0
        assert cell["ttft_p50_s"] > 0 and cell["output_tokens_per_s"] > 0
        if name.endswith("no_reuse"):
            assert cell["cached_prompt_share"] == 0.0
        else:
            # every request after the first shares at least the system policy's full blocks
            assert cell["cached_prompt_share"] > 0.5
    assert set(result["summary"]) == {"c1", "c2"}
    assert result["turns"] == 6


def test_bad_agent_arguments_exit_2(capsys):
    args = SimpleNamespace(
        prompts=1, max_tokens=1, num_draft_tokens=8, peer_draft_tokens=16, dtype="fp32", json=True, agent_conversations=2,
        agent_turns=1, agent_max_tokens=1, agent_concurrency="0", traces_dir=None,
    )
    assert engine_bench._main(args) == 2
    assert "--agent-concurrency" in capsys.readouterr().err


def test_draft_tokens_outside_the_engine_range_exit_2(capsys):
    for ours, peer, flag in ((0, 16, "--num-draft-tokens"), (65, 16, "--num-draft-tokens"), (32, 0, "--peer-draft-tokens"),
                             (32, 65, "--peer-draft-tokens")):
        args = SimpleNamespace(
            prompts=1, max_tokens=1, num_draft_tokens=ours, peer_draft_tokens=peer, dtype="fp32", json=True,
            agent_conversations=0, agent_turns=1, agent_max_tokens=1, agent_concurrency="1", traces_dir=None,
        )
        assert engine_bench._main(args) == 2
        assert f"{flag} must be between 1 and 64" in capsys.readouterr().err


def test_draft_tokens_default_to_each_sides_tuned_length():
    import argparse

    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig

    parser = argparse.ArgumentParser()
    engine_bench.register(parser.add_subparsers())
    args = parser.parse_args(["engine"])
    assert args.num_draft_tokens == EmbeddedEngineConfig().num_draft_tokens == 32
    assert args.prompts == engine_bench.REPORT_PROMPTS == 24  # the report set, never the tuning prompts
    assert args.peer_draft_tokens is None  # the peer's own choice on the tuning prompts, per dtype:
    assert engine_bench.PEER_DRAFT_TOKENS == {"fp32": 16, "bf16": 32}


def test_reports_only_the_report_set_never_the_tuning_prompts(capsys):
    # the shipped list holds 30 prompts: 24 reported, and 6 that the lab's tuning studies decode
    assert engine_bench.REPORT_PROMPTS == 24 and len(engine_bench.load_prompts(100)) == 24
    assert len(engine_bench.load_prompts(100, "tuning")) == 6 and len(engine_bench.load_prompts(100, "all")) == 30
    # 8 a category, taken round-robin: any --prompts keeps the categories balanced
    report = engine_bench.load_prompts(24)
    assert [p["category"] for p in report[:3]] == ["chat", "code_edit", "agent"]
    assert [sum(p["category"] == c for p in report) for c in ("chat", "code_edit", "agent")] == [8, 8, 8]
    assert [p["category"] for p in engine_bench.load_prompts(5)] == ["chat", "code_edit", "agent", "chat", "code_edit"]
    args = SimpleNamespace(
        prompts=25, max_tokens=1, num_draft_tokens=32, peer_draft_tokens=None, dtype="fp32", json=True,
        agent_conversations=0, agent_turns=1, agent_max_tokens=1, agent_concurrency="1", traces_dir=None,
    )
    assert engine_bench._main(args) == 2
    assert "--prompts is at most 24, the report set" in capsys.readouterr().err


def test_a_missing_trace_is_refused_before_any_model_loads(tmp_path, capsys, monkeypatch):
    loads = []
    monkeypatch.setattr(engine_bench, "run_engine_bench", lambda *a, **k: loads.append(k["agent"]) or {})
    args = SimpleNamespace(
        prompts=1, max_tokens=1, num_draft_tokens=32, peer_draft_tokens=None, dtype="fp32", json=True,
        agent_conversations=2, agent_turns=1, agent_max_tokens=1, agent_concurrency="1", traces_dir=str(tmp_path),
        row_exact=False,
    )
    assert engine_bench._main(args) == 2
    assert capsys.readouterr().err == (
        f"ray-dspine bench engine: --traces-dir: cannot read the tau-bench trace: trace 'tau-bench' not found at "
        f"{tmp_path}/tau-bench/gpt-4o-airline.json (set --traces-dir or DSPINE_TRACES_DIR)\n"
    )
    assert loads == []
    write_trace(tmp_path, runs=2)
    assert engine_bench._main(args) == 0  # the same flags run once the trace is there, with its turns
    assert [len(turns) for turns in loads[0]["conversations"]] == [1, 1]
