"""OpenAI's Responses API, the answer: the chat stream of a `POST /v1/responses` request (openai_responses.py) turned
into the Responses events and the final response.

Rules:
  response  {id "resp_" + the request's id, object "response", status, output, usage, and the request's
            settings echoed: instructions, max_output_tokens, model, parallel_tool_calls, reasoning, temperature,
            text, tool_choice, tools, top_p, truncation, user, metadata; store false}. output, as SGLang's
            `_output_items`: a reasoning item (content [reasoning_text]; summary [summary_text] of the same text
            when reasoning.summary is set), a message item (one output_text; phase "commentary" when calls
            follow it, else "final_answer"), then one function_call item per call (call_id = the chat call's
            id). status: completed, incomplete (ended by max_output_tokens: incomplete_details), or failed.
            usage: input_tokens, input_tokens_details.cached_tokens, output_tokens,
            output_tokens_details.reasoning_tokens (the chat usage's completion_tokens_details: SGLang's count
            on sglang pools, 0 where the model does not reason), total_tokens; then ours, as the chat usage
            carries them once a request ends: verify_steps, accept_length, accept_histogram and path.
  stream    events as SGLang's `_responses_stream_generator_non_harmony` sends them, each with its
            sequence_number from 0: response.created and response.in_progress; per item output_item.added,
            then for reasoning content_part.added (reasoning_text) and reasoning_text.delta (with
            reasoning.summary: reasoning_summary_part.added and reasoning_summary_text.delta), for a message
            content_part.added (output_text) and output_text.delta, for a call function_call_arguments.delta;
            an item closes with its .done events and output_item.done when another kind starts, a new call
            starts, or the stream ends; then response.completed / response.incomplete / response.failed with
            the whole response. A message's phase is named when it closes (commentary when a call closes it):
            SGLang holds a tool-enabled request's text back until it knows whether a call follows, ours sends
            it at once, so a message closed by another item says final_answer in its output_item.done and is
            commentary in the final response when a call follows later. A stream that fails once started (a
            chat error event, or an error finish without one) closes its open item and ends with
            response.failed carrying the error {code: server_error, message} and the items so far.
  answer    both kinds take the chat stream with usage on every event; a request that did not ask to stream
            gets the final response, or, when the chat stream failed, the chat path's error with its status. So
            a call cut off by max_output_tokens keeps the arguments it had streamed either way, as SGLang's
            stream does (SGLang's non-streamed answer closes the JSON object).
Complexity: O(1) per stream event.
"""

from __future__ import annotations

import json
import time
import uuid

SPECULATION = ("verify_steps", "accept_length", "accept_histogram", "path")  # ours, after OpenAI's usage
# a chat error event's code, else its type -> the HTTP status of the same error (rule `answer`)
STATUS_BY_CODE = {"timeout": 504, "replica_failed": 502}
STATUS_BY_TYPE = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                  "rate_limit_exceeded": 429, "service_unavailable": 503}  # fmt: skip


def response_id(chat_id: str) -> str:
    return "resp_" + chat_id.split("-", 1)[-1]


def sse(event: dict) -> str:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


def status_of(error: dict) -> int:
    """The HTTP status of a chat error event's error (rule `answer`)."""
    return STATUS_BY_CODE.get(error.get("code"), STATUS_BY_TYPE.get(error.get("type"), 500))


class ResponseStream:
    """Rules `response` and `stream`: feed it the chat stream's SSE events in order; it returns the Responses
    events to send, and holds the response (`response`) and, when the chat stream failed, its error (`error`)."""

    def __init__(self, settings: dict, summary: bool = False, clock=time.time):
        self._settings = settings
        self._summary = summary
        self._id = "resp_" + uuid.uuid4().hex[:24]  # until the first event names the request
        self._created = int(clock())
        self._sequence = 0
        self._started = False
        self._output: list[dict] = []  # items in output order; the open one last
        self._open: str | None = None  # kind of the open item: reasoning, message, function_call
        self._finish: str | None = None
        self._usage: dict = {}
        self.error: dict | None = None  # the chat error event's error, when the stream failed
        self.done = False

    # -- what the chat stream says --------------------------------------------------------------
    def feed(self, event: str) -> list[str]:
        if self.done or not event.startswith("data: "):
            return []
        data = event[len("data: "):].strip()
        if data == "[DONE]":
            return self._end()
        body = json.loads(data)
        if "error" in body and "choices" not in body:
            return self._fail(body["error"] or {})
        if not self._started and body.get("id"):
            self._id = response_id(body["id"])
        out = self._start()
        if body.get("usage"):
            self._usage = body["usage"]
        for choice in body.get("choices") or []:
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
            if delta.get("reasoning_content"):
                out += self._reasoning(delta["reasoning_content"])
            if delta.get("content"):
                out += self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                out += self._call(call)
        return out

    # -- events ------------------------------------------------------------------------------
    def _send(self, event: dict) -> str:
        event["sequence_number"] = self._sequence
        self._sequence += 1
        return sse(event)

    def _start(self) -> list[str]:
        if self._started:
            return []
        self._started = True
        snapshot = self.response("in_progress", items=[])
        return [self._send({"type": "response.created", "response": snapshot}),
                self._send({"type": "response.in_progress", "response": snapshot})]  # fmt: skip

    def _item(self) -> dict:
        return self._output[-1]

    def _where(self) -> dict:
        return {"item_id": self._item()["id"], "output_index": len(self._output) - 1}

    def _add(self, kind: str, item: dict) -> list[str]:
        out = self._close()
        self._output.append(item)
        self._open = kind
        return out + [self._send({"type": "response.output_item.added", "output_index": len(self._output) - 1,
                                  "item": dict(item)})]  # fmt: skip

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self._id.removeprefix('resp_')}{len(self._output):02x}"

    def _reasoning(self, text: str) -> list[str]:
        out = []
        if self._open != "reasoning":
            item = {"id": self._item_id("rs"), "type": "reasoning", "summary": [], "content": [],
                    "status": "in_progress"}  # fmt: skip
            out += self._add("reasoning", item)
            if self._summary:
                out.append(self._send({"type": "response.reasoning_summary_part.added", **self._where(),
                                       "summary_index": 0, "part": {"type": "summary_text", "text": ""}}))  # fmt: skip
            else:
                out.append(self._send({"type": "response.content_part.added", **self._where(), "content_index": 0,
                                       "part": {"type": "reasoning_text", "text": ""}}))  # fmt: skip
            self._item()["text"] = ""
        self._item()["text"] += text
        if self._summary:
            kind, index = "response.reasoning_summary_text.delta", {"summary_index": 0}
        else:
            kind, index = "response.reasoning_text.delta", {"content_index": 0}
        return out + [self._send({"type": kind, **self._where(), **index, "delta": text})]

    def _text(self, text: str) -> list[str]:
        out = []
        if self._open != "message":
            item = {"id": self._item_id("msg"), "type": "message", "role": "assistant", "content": [],
                    "status": "in_progress"}  # fmt: skip
            out += self._add("message", item)
            out.append(self._send({"type": "response.content_part.added", **self._where(), "content_index": 0,
                                   "part": {"type": "output_text", "text": "", "annotations": []}}))  # fmt: skip
            self._item()["text"] = ""
        self._item()["text"] += text
        return out + [self._send({"type": "response.output_text.delta", **self._where(), "content_index": 0,
                                  "delta": text, "logprobs": []})]  # fmt: skip

    def _call(self, call: dict) -> list[str]:
        function = call.get("function") or {}
        out = []
        if function.get("name"):
            for item in self._output:  # a message before a call is commentary
                if item["type"] == "message":
                    item["phase"] = "commentary"
            item = {"id": self._item_id("fc"), "type": "function_call", "call_id": call.get("id") or "",
                    "name": function["name"], "arguments": "", "status": "in_progress"}  # fmt: skip
            out += self._add("function_call", item)
        if function.get("arguments") and self._open == "function_call":
            self._item()["arguments"] += function["arguments"]
            out.append(self._send({"type": "response.function_call_arguments.delta", **self._where(),
                                   "delta": function["arguments"]}))  # fmt: skip
        return out

    def _close(self) -> list[str]:
        if self._open is None:
            return []
        kind, item, where = self._open, self._item(), self._where()
        self._open = None
        out = []
        if kind == "reasoning":
            text = item.pop("text")
            item["content"] = [{"type": "reasoning_text", "text": text}]
            if self._summary:
                item["summary"] = [{"type": "summary_text", "text": text}]
                out.append(self._send({"type": "response.reasoning_summary_text.done", **where, "summary_index": 0,
                                       "text": text}))  # fmt: skip
                out.append(self._send({"type": "response.reasoning_summary_part.done", **where, "summary_index": 0,
                                       "part": {"type": "summary_text", "text": text}}))  # fmt: skip
            else:
                out.append(self._send({"type": "response.reasoning_text.done", **where, "content_index": 0,
                                       "text": text}))  # fmt: skip
                out.append(self._send({"type": "response.content_part.done", **where, "content_index": 0,
                                       "part": {"type": "reasoning_text", "text": text}}))  # fmt: skip
        elif kind == "message":
            part = {"type": "output_text", "text": item.pop("text"), "annotations": []}
            item["content"] = [part]
            item.setdefault("phase", "final_answer")
            out.append(self._send({"type": "response.output_text.done", **where, "content_index": 0,
                                   "text": part["text"], "logprobs": []}))  # fmt: skip
            out.append(self._send({"type": "response.content_part.done", **where, "content_index": 0, "part": part}))
        else:
            out.append(self._send({"type": "response.function_call_arguments.done", **where, "name": item["name"],
                                   "arguments": item["arguments"]}))  # fmt: skip
        item["status"] = "completed"
        return out + [self._send({"type": "response.output_item.done", "output_index": where["output_index"],
                                  "item": dict(item)})]  # fmt: skip

    def _end(self) -> list[str]:
        self.done = True
        if self._finish == "error" and self.error is None:  # an error finish no error event named
            self.error = {"message": "the answer ended with an error", "type": "server_error", "code": None}
        out = self._start() + self._close()
        final = self.response()
        return out + [self._send({"type": f"response.{final['status']}", "response": final})]

    def _fail(self, error: dict) -> list[str]:
        self.done = True
        self.error = error
        out = self._start() + self._close()
        return out + [self._send({"type": "response.failed", "response": self.response()})]

    # -- the response ----------------------------------------------------------------------------
    def usage(self) -> dict | None:
        if not self._usage:
            return None
        usage = self._usage
        cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        reasoning = int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0)
        out = {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": cached},
               "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": reasoning},
               "total_tokens": prompt + completion}  # fmt: skip
        out.update({key: usage[key] for key in SPECULATION if key in usage})
        return out

    def response(self, status: str | None = None, items: list[dict] | None = None) -> dict:
        """The response object (rule `response`): after the stream ended, the final one."""
        if status is None:
            status = "failed" if self.error is not None else {"length": "incomplete"}.get(self._finish, "completed")
        output = [dict(item) for item in (self._output if items is None else items)]
        failed = status == "failed" and self.error is not None
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "error": {"code": "server_error", "message": self.error.get("message") or ""} if failed else None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            **self._settings,
            "output": output,
            "usage": self.usage() if status != "in_progress" else None,
        }

