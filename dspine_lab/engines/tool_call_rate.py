"""How often does the embedded model answer a tool-worthy question with the right call? From the tools alone,
and with two earlier calls in the conversation.

Rules:
  questions  each city of CITIES (Paris and London, the earlier calls' cities, are not among them) asked two
             ways: "What's the weather in C?" and "Is it raining in C right now?".
  arms       `tools alone`: the question as the only message, with `tools` = [WEATHER]; `two-shot`: the same
             question after `two_shot`'s conversation (two asked-called-answered turns). Greedy, the engine's
             defaults (speculation on), one request at a time, `max_tokens` each.
  outcome    `right call`: exactly one call, get_weather, arguments {"city": C}; `other call`: any other call or
             calls; `text`: no call (what the engine's tool-call reader found, tool_parser.py).
  figures    per arm, the count of each outcome over the questions, and the fraction of right calls.
Complexity: 2 x questions decodes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ray_dspine.bench.receipt import cpu_name, git_state

CITIES = ("Tokyo", "Berlin", "Rome", "Madrid", "Cairo", "Lima", "Oslo", "Seoul", "Dublin", "Nairobi", "Toronto",
          "Sydney")  # fmt: skip
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                   "required": ["city"]}}}  # fmt: skip


def two_shot(question: str) -> list[dict]:
    """OpenAI chat messages: two asked-and-called turns (Paris, London), each answered, then `question`."""
    turns = []
    for n, city in enumerate(("Paris", "London")):
        call = {"id": f"c{n}", "type": "function",
                "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}  # fmt: skip
        turns += [{"role": "user", "content": f"What's the weather in {city}?"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "content": '{"temperature_c": 18}', "tool_call_id": f"c{n}"},
                  {"role": "assistant", "content": f"It is 18 °C in {city}."}]  # fmt: skip
    return turns + [{"role": "user", "content": question}]


def questions() -> list[tuple[str, str]]:
    """Rule `questions`: (city, question) pairs."""
    return [(city, ask.format(city)) for city in CITIES
            for ask in ("What's the weather in {}?", "Is it raining in {} right now?")]  # fmt: skip


ARMS = {"tools alone": lambda question: [{"role": "user", "content": question}], "two-shot": two_shot}


def outcome(calls: list[dict], city: str) -> str:
    """Rule `outcome` for an answer's tool-call deltas (each call whole, as tool_parser.py sends them)."""
    if not calls:
        return "text"
    (call, *more) = calls
    right = call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": city}
    return "right call" if right and not more else "other call"


def measure(loaded, config, max_tokens: int, progress=lambda _line: None) -> dict:
    """Rules `arms` and `figures`."""
    from ray_dspine.engines.embedded.engine import EmbeddedEngine
    from ray_dspine.engines.protocol import ChatMessage, GenerateRequest

    async def run() -> dict:
        engine = EmbeddedEngine(config, loader=lambda _c: loaded)
        await engine.start()
        counts = {arm: {"right call": 0, "other call": 0, "text": 0} for arm in ARMS}
        try:
            for arm, conversation in ARMS.items():
                for i, (city, question) in enumerate(questions()):
                    request = GenerateRequest(request_id=f"{arm}-{i}", max_tokens=max_tokens, temperature=0.0,
                                              messages=[ChatMessage.model_validate(m) for m in conversation(question)],
                                              tools=[WEATHER])  # fmt: skip
                    calls = [d async for chunk in engine.generate(request) for d in chunk.tool_calls or []]
                    counts[arm][outcome(calls, city)] += 1
                progress(f"{arm}: {counts[arm]}")
        finally:
            await engine.stop()
        return counts

    counts = asyncio.run(run())
    return {"counts": counts, "right_share": {arm: c["right call"] / len(questions()) for arm, c in counts.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dspine_lab.engines.tool_call_rate", description=__doc__.split("\n")[0])
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per answer at most (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON with its receipt fields")
    args = parser.parse_args(argv)
    if args.max_tokens < 1:
        parser.error("--max-tokens must be at least 1")
    from ray_dspine.engines.embedded import compute
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    config = EmbeddedEngineConfig(dtype="fp32")
    loaded = compute.run(load_model, config)
    result = measure(loaded, config, args.max_tokens, lambda line: print(line, file=sys.stderr))
    if args.json:
        receipt = {
            "command_line": " ".join(["python -m dspine_lab.engines.tool_call_rate",
                                      *(argv if argv is not None else sys.argv[1:])]),
            "device_name": cpu_name(), "git": git_state().model_dump(), "questions": len(questions()),
            "max_tokens": args.max_tokens, **result,
        }  # fmt: skip
        print(json.dumps(receipt, indent=1))
        return 0
    for arm, counts in result["counts"].items():
        share = result["right_share"][arm]
        print(f"MEASURED {arm}: right call {counts['right call']}, other call {counts['other call']}, "
              f"text {counts['text']} of {len(questions())} ({share:.0%} right)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
