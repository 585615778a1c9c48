"""A conversation in which SmolLM2-135M calls a tool: two earlier weather calls, then a new question.

With the tools block in the system message and these two calls in its history, the model (fp32, greedy) answers
"What's the weather in Tokyo?" with a get_weather call of its own, and "Thanks! What is 2+2?" with text.
"""

import json

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
