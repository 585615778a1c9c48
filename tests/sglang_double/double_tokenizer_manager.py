"""TokenizerManagerDouble: SGLang's own TokenizerManager, cut loose from the processes it would talk to.

SGLang's TokenizerManager.__init__ loads the checkpoint's tokenizer and ModelConfig, opens ZMQ sockets to the
scheduler and detokenizer processes and a shared-memory load reader. This subclass runs SGLang's own init steps
that need none of that (`init_running_status`, `init_request_logging_and_dumping`, `init_weight_update`,
`init_lora`, `init_request_dispatcher`) and sets the rest by hand; every request then goes through SGLang's own
methods: `generate_request` (normalize, `_init_req_state`, `_tokenize_one_request` with its length checks and
SamplingParams normalize/verify, `_wait_one_response`), `_handle_batch_output` (meta_info, speculative metrics),
`abort_request`, `create_abort_task`, `get_loads`, `config_value`.

Rules (what differs from a server, and why):
  model      tokenizer and model config are the doubles of double_tokenizer.py (no checkpoint files here).
  dispatch   `_send_one_request` marks the request dispatched and hands the TokenizedGenerateReqInput to
             SchedulerDouble (SGLang's version first prepares CUDA IPC transports and pickles it for ZMQ);
             `_dispatch_to_scheduler` (aborts) goes to SchedulerDouble too.
  loop       `auto_create_handle_loop` only records the event loop: outputs arrive by direct calls to
             `_handle_batch_output`, not through the ZMQ receive loop, and no signal handlers are installed.
  loads      `load_snapshot_reader` reads SchedulerDouble's LoadSnapshot instead of shared memory.
  metrics    tokenizer-side Prometheus metrics are off (`enable_metrics` False here); /metrics carries the
             scheduler's gauges (SchedulerMetricsCollector), which is what the engine reads.
  knobs      SGLANG_DOUBLE_CRASH_AFTER=N: the process dies (exit 134) when request N+1 (health checks not
             counted) reaches generate_request; SGLANG_DOUBLE_CRASH_WITH_DRAFTER_ONLY=1 limits that to a launch
             with a drafter. A request whose generator is closed before it finishes (the client went away)
             is recorded as a `disconnect` event; SGLang's own health-check generations are neither counted
             nor recorded.
"""

from __future__ import annotations

import asyncio
import os
import sys

from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX
from sglang.srt.managers.tokenizer_manager import ServerStatus, TokenizerManager
from sglang.srt.observability.req_time_stats import real_time
from sglang.srt.runtime_context import get_model, get_schedule, get_serving

from double_runtime import event
from double_scheduler import LoadSnapshotReaderDouble, SchedulerDouble
from double_tokenizer import build_model_config, build_tokenizer


class TokenizerManagerDouble(TokenizerManager):
    def __init__(self, server_args) -> None:  # noqa: D107  (SGLang's __init__ is replaced, see the module rules)
        self.server_args = server_args
        self.startup_time = None
        self.elastic_worker_count = 1
        self.attn_replica_size = 1
        self.enable_metrics = False
        self.incremental_streaming_output = get_serving().incremental_streaming_output
        self.enable_lora = False
        self.enable_trace = False
        self.allow_auto_truncate = get_serving().allow_auto_truncate
        self.skip_tokenizer_init = False
        self.preferred_sampling_params = get_serving().preferred_sampling_params
        self.crash_dump_folder = None
        self.model_path = get_model().model_path
        self.served_model_name = get_serving().served_model_name
        self.model_config = build_model_config(self.model_path, server_args.context_length)
        self.is_generation = True
        self.context_len = self.model_config.context_len
        self.image_token_id = None
        self.max_req_input_len = None
        self.enable_priority_scheduling = get_schedule().enable_priority_scheduling
        self.default_priority_value = get_schedule().default_priority_value
        self.num_reserved_tokens = 0
        self.validate_total_tokens = True
        self.mm_processor = self.processor = None
        self.tokenizer = build_tokenizer()
        self.async_dynamic_batch_tokenizer = None
        self.tokenizer_ipc_name = None
        self.init_running_status()
        self.init_request_logging_and_dumping()
        self.init_weight_update()
        self.init_lora()
        self.disaggregation_mode = "null"
        self.init_request_dispatcher()
        self.scheduler = SchedulerDouble(server_args, self.tokenizer, self)
        self.load_snapshot_reader = LoadSnapshotReaderDouble(self.scheduler)
        self.num_requests = 0

    def auto_create_handle_loop(self):
        if self.event_loop is None:
            self.event_loop = asyncio.get_running_loop()

    def _dispatch_to_scheduler(self, obj) -> None:
        self.scheduler.receive(obj)

    async def _send_one_request(self, tokenized_obj) -> None:
        self._mark_state_dispatched(tokenized_obj.rid)
        self.scheduler.receive(tokenized_obj)

    def mark_up(self) -> None:
        self.server_status = ServerStatus.Up
        self.last_receive_tstamp = real_time()

    async def generate_request(self, obj, request=None):
        health = isinstance(obj.rid, str) and obj.rid.startswith(HEALTH_CHECK_RID_PREFIX)
        if not health:
            self._count_request()
        finished = health  # SGLang's health route cancels its own generation once the scheduler answers
        responses = super().generate_request(obj, request)
        try:
            async for out in responses:
                finished = finished or bool(out.get("meta_info", {}).get("finish_reason"))
                yield out
        finally:
            if not finished:
                event(event="disconnect", rid=obj.rid)
            await responses.aclose()

    def _count_request(self) -> None:
        self.num_requests += 1
        crash_after = os.environ.get("SGLANG_DOUBLE_CRASH_AFTER")
        drafter_only = os.environ.get("SGLANG_DOUBLE_CRASH_WITH_DRAFTER_ONLY") == "1"
        if crash_after is not None and self.num_requests > int(crash_after) and (
                self.scheduler.drafter or not drafter_only):
            event(event="crash", request=self.num_requests)
            sys.stderr.write("Fatal Python error: scheduler process died (double)\n")
            sys.stderr.flush()
            os._exit(134)
