"""How much of a pool's time to first token was spent beside another request's prefill, from a replay's records.

What it answers: in a paired replay (`bench replay --each-pool A,B`) one arm's first token can come later
than the other's on the same turns. Is that its own cost (a prefill chunk riding with longer verify
blocks, a wait for a longer round), or two prompts prefilling in the same pool at once, which happens
more often in an arm that answers faster, since a closed loop then sends its turns closer together?

Rules (times in seconds, every record read from one replay's records.jsonl):
  window    W_r = [start_offset_s, start_offset_s + ttft_s] for every answered record r with a first
            token: the request's wait for its first token (its queueing and its prefill).
  shared    s_r = the length of W_r covered by the union of the windows W_q of the other records q of the
            same pool (`pool`, else `arm`): the seconds r waited while another prompt of its pool waited
            too. A forward carries one prefill chunk at most (engine.py round rule), so two prompts
            prefilling at once take turns, and each one's first token waits for the other's chunks.
  per pool  turns, the sum of ttft_s, the sum of s_r, and the turns with s_r > 0.
  paired    given a baseline arm: the turns answered on both arms (same trace_request_id and repetition);
            `alone` keeps those with s_r = 0 on both. On all of them and on the alone ones, the ratio of
            mean ttft_s (arm / baseline), and on all of them the ratio of mean (ttft_s - s_r), each with
            its 95% interval from the paired cluster bootstrap over conversations
            (ray_dspine.bench.stats.paired_cluster_ratio_ci, a cluster per session and repetition,
            1,000 resamples, generator seeded 0).
Output: the figures, and with --json the command and, from the replay's receipt.json beside the records,
its commit, command and machine (`device_name`): the figures are that run's, read again.
Example: windows [0, 2], [1, 4] and [5, 6] in one pool share 1, 1 and 0 s; windows [0, 4], [1, 2] and
[1.5, 3] share 2 ([1, 3]), 1 and 1.5 s.
Complexity: O(n^2) in the records of a pool (a replay holds hundreds).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ray_dspine.bench.records import RequestRecord, read_records
from ray_dspine.bench.stats import paired_cluster_ratio_ci


def covered(window: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """The length of `window` covered by the union of `others` (rule `shared`)."""
    start, end = window
    pieces = sorted((max(start, a), min(end, b)) for a, b in others if min(end, b) > max(start, a))
    total, reach = 0.0, start
    for a, b in pieces:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def shared_seconds(records: list[RequestRecord]) -> dict[str, float]:
    """s_r for every answered record with a first token, by request_id (rules `window` and `shared`)."""
    windows: dict[str, list[tuple[str, tuple[float, float]]]] = {}
    for r in records:
        if r.ok and r.ttft_s is not None:
            windows.setdefault(r.pool or r.arm, []).append((r.request_id, (r.start_offset_s, r.start_offset_s + r.ttft_s)))
    shared = {}
    for members in windows.values():
        for i, (request_id, window) in enumerate(members):
            shared[request_id] = covered(window, [w for j, (_rid, w) in enumerate(members) if j != i])
    return shared


def pool_figures(records: list[RequestRecord], shared: dict[str, float]) -> dict[str, dict]:
    """Rule `per pool`."""
    pools: dict[str, dict] = {}
    for r in records:
        if r.request_id not in shared:
            continue
        p = pools.setdefault(r.pool or r.arm, {"turns": 0, "ttft_s": 0.0, "shared_s": 0.0, "turns_shared": 0})
        p["turns"] += 1
        p["ttft_s"] += r.ttft_s
        p["shared_s"] += shared[r.request_id]
        p["turns_shared"] += shared[r.request_id] > 0
    return pools


def _ratio(rows: list[tuple[str, float, float]]) -> dict | None:
    if not rows:
        return None
    ci = paired_cluster_ratio_ci(rows, np.random.default_rng(0), stat="mean")
    return {"turns": len(rows), "estimate": ci.estimate, "low": ci.low, "high": ci.high}


def paired_figures(records: list[RequestRecord], shared: dict[str, float], arm: str, baseline: str) -> dict:
    """Rule `paired`: arm / baseline on the turns both answered, on the alone ones, and net of shared seconds."""
    def answered(name: str) -> dict[tuple[str, int], RequestRecord]:
        return {(r.trace_request_id, r.repetition): r for r in records if r.arm == name and r.request_id in shared}

    base, other = answered(baseline), answered(arm)
    common = sorted(set(base) & set(other))
    if not common:
        raise ValueError(f"no turn was answered on both arm {arm!r} and baseline {baseline!r}")

    def cluster(key: tuple[str, int]) -> str:
        return f"{base[key].session_id}-r{key[1]}"

    alone = [k for k in common if shared[base[k].request_id] == 0 and shared[other[k].request_id] == 0]
    return {
        "arm": arm,
        "baseline": baseline,
        "ttft_mean_ratio": _ratio([(cluster(k), base[k].ttft_s, other[k].ttft_s) for k in common]),
        "ttft_mean_ratio_alone": _ratio([(cluster(k), base[k].ttft_s, other[k].ttft_s) for k in alone]),
        "ttft_minus_shared_mean_ratio": _ratio([
            (cluster(k), base[k].ttft_s - shared[base[k].request_id], other[k].ttft_s - shared[other[k].request_id])
            for k in common
        ]),
    }


def replay_context(records_path: Path) -> dict:
    """The machine and commit of the replay that wrote the records, from the receipt.json beside them (if any):
    these figures are that run's, read again."""
    receipt = records_path.with_name("receipt.json")
    try:
        data = json.loads(receipt.read_text())
    except (OSError, ValueError):
        return {}
    hardware = data.get("hardware") or {}
    context = {"replay_git": data.get("git"), "replay_command_line": data.get("command_line")}
    if hardware.get("cpu_model"):
        context["device_name"] = f"{hardware['cpu_model']}, {hardware.get('num_cpus')} cores"
    return context


def _describe(name: str, ratio: dict | None) -> str:
    if ratio is None:
        return f"  {name}: no turns"
    return (f"  {name}: {ratio['estimate']:.3f} (95% interval {ratio['low']:.3f} to {ratio['high']:.3f}, "
            f"{ratio['turns']} turns)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dspine_lab.bench.first_token_wait",
        description="Time to first token spent beside another prefill of the same pool, from a replay's records.",
    )
    parser.add_argument("records", type=Path, help="a replay's records.jsonl (bench replay --out DIR writes DIR/records.jsonl)")
    parser.add_argument("--arm", help="the arm compared (with --baseline-arm): paired ratios arm / baseline")
    parser.add_argument("--baseline-arm", help="the baseline arm of the paired ratios")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    if (args.arm is None) != (args.baseline_arm is None):
        parser.error("--arm and --baseline-arm go together: name both arms of the paired ratios, or neither")
    try:
        records = read_records(args.records)
    except FileNotFoundError:
        parser.error(f"records: no file {args.records}; give the records.jsonl a replay wrote")
    except ValueError as exc:
        parser.error(f"records: {args.records} is not a replay's records.jsonl ({str(exc).splitlines()[0]})")
    shared = shared_seconds(records)
    result: dict = {
        "command_line": " ".join(["python -m dspine_lab.bench.first_token_wait", *(argv if argv is not None else sys.argv[1:])]),
        "records": str(args.records),
        **replay_context(args.records),
        "pools": pool_figures(records, shared),
    }
    if args.arm is not None:
        try:
            result["paired"] = paired_figures(records, shared, args.arm, args.baseline_arm)
        except ValueError as exc:
            parser.error(str(exc))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"MEASURED time to first token beside another prefill of the same pool, from {args.records}")
    for name, p in sorted(result["pools"].items()):
        print(f"  pool {name}: {p['turns']} turns, TTFT {p['ttft_s']:.1f} s in all, {p['shared_s']:.1f} s of it "
              f"beside another prefill ({p['turns_shared']} turns)")
    paired = result.get("paired")
    if paired:
        print(f"MEASURED paired TTFT mean ratio {paired['arm']} / {paired['baseline']}:")
        print(_describe("all turns", paired["ttft_mean_ratio"]))
        print(_describe("turns alone on both arms", paired["ttft_mean_ratio_alone"]))
        print(_describe("all turns, less the shared seconds", paired["ttft_minus_shared_mean_ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
