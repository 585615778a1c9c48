"""The SGLang engine: the engine protocol over one supervised SGLang server process per replica.

`start()` fetches the pinned target (and drafter) into the local cache, plans capacity twice (with the
drafter, and without it for the autoregressive fallback; the target's own config.json wins over the
shipped profile when the artifact has one), launches the server and starts a background poll of
`/v1/loads` and `/metrics` every `load_poll_s`; `load()` returns the last snapshot without I/O.
`generate()` streams from the server's OpenAI endpoints (see mapping.py); when the consumer stops early
the upstream stream is closed and `/abort_request` is posted for the request id.
Supervision (process.py, supervision.py): the supervisor gets SGLang's /health_generate as its hang check
and, for a drafter pool, a greedy probe that must show speculation (`spec_verify_ct > 0`). Its status
(`supervision_status()`) gives the served path ("autoregressive-fallback" when a drafter pool lost its
drafter), the fallback reason and a config error's SGLang line. A server that refused its arguments
leaves the replica up and unhealthy: `check_health()` does not raise for it (Ray would only start a
replica that refuses the same arguments), `generate()` answers 503 with SGLang's line.
SGLang counts waiting requests but not their prompt tokens, so the replica keeps the prefill backlog the
router needs itself, from what it sends and each request's first token (prefill_backlog.py), and adds it
to load().
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import AsyncIterator, Callable

import httpx

from ...artifacts import fetch
from ...capacity import CapacityPlan, load_hf_config, plan_capacity, resolve_profile
from ..prefill_backlog import PrefillBacklog
from ..protocol import Chunk, EngineError, GenerateRequest, LoadSnapshot
from .args import redact, render_command
from .client import SGLangClient, UpstreamError
from .config import SGLangEngineConfig
from .load import LoadInputs, build_snapshot, parse_gauges, update_ema
from .mapping import StreamMapper, build_payload, count_payload, endpoint_for
from .policy import CrashPolicy
from .process import Launcher, ServerSupervisor, launch_subprocess
from .supervision import SupervisionConfig, SupervisionStatus, probe_payload, probe_verdict, spec_details_of

log = logging.getLogger(__name__)


class SGLangEngine:
    def __init__(
        self,
        config: SGLangEngineConfig,
        *,
        launcher: Launcher = launch_subprocess,
        http_client: httpx.AsyncClient | None = None,
        fetcher: Callable[..., Path] = fetch,
        clock: Callable[[], float] = time.monotonic,
        pool_name: str = "pool",
    ):
        self.config = config
        self._launcher, self._http, self._owns_http = launcher, http_client, http_client is None
        self._fetcher, self._clock, self._pool_name = fetcher, clock, pool_name
        self._client: SGLangClient | None = None
        self._supervisor: ServerSupervisor | None = None
        self._plans: dict[bool, CapacityPlan] = {}
        self._model_dir: Path | None = None
        self._draft_dir: Path | None = None
        self._poller: asyncio.Task | None = None
        self._snapshot = LoadSnapshot(healthy=False, engine="sglang")
        self._accept_ema = 1.0
        self._inflight = 0
        self._backlog = PrefillBacklog(
            clock, block_tokens=config.prefix_block_tokens, default_tokens_per_s=config.prefill_tokens_per_s or 0.0
        )
        self._launches_seen = 0
        self._background: set[asyncio.Task] = set()
        self._supervision: SupervisionConfig = config.supervision

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.config
        self._model_dir = await self._fetch(cfg.target)
        if cfg.draft is not None:
            self._draft_dir = await self._fetch(cfg.draft)
        capacity = cfg.capacity
        own_config = (self._model_dir / "config.json").is_file() and capacity.target_config_path is None
        profile = load_hf_config(self._model_dir) if own_config else resolve_profile(capacity)
        without_draft = capacity.model_copy(update={"draft": None})
        self._plans[False] = plan_capacity(without_draft, profile, pool_name=self._pool_name)
        if cfg.has_drafter:
            self._plans[True] = plan_capacity(capacity, profile, pool_name=self._pool_name)
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=httpx.Timeout(cfg.request_timeout_s, connect=5.0))
        self._client = SGLangClient(self._http)
        log_dir = Path(cfg.log_dir) if cfg.log_dir else Path(tempfile.mkdtemp(prefix="ray-dspine-sglang-"))
        self._supervisor = ServerSupervisor(
            build_command=self._build_command, env={**os.environ, **cfg.env}, log_dir=log_dir,
            launcher=self._launcher, probe=self._client.healthy,
            policy=CrashPolicy(
                max_restarts=cfg.max_restarts, crash_window_s=cfg.crash_window_s,
                fallback_after_crashes=cfg.fallback_after_crashes, backoff_s=cfg.restart_backoff_s,
                backoff_max_s=cfg.restart_backoff_max_s,
            ),
            drafter_available=cfg.has_drafter, startup_timeout_s=cfg.startup_timeout_s,
            health_poll_s=cfg.health_poll_s, stop_grace_s=cfg.stop_grace_s, drain_s=cfg.drain_s,
            preferred_port=cfg.port, inflight=lambda: self._inflight, clock=self._clock,
            health_check=self._client.health_generate,
            drafter_probe=self._probe_drafter if self._supervision.drafter_probe else None,
            supervision=self._supervision,
        )  # fmt: skip
        await self._supervisor.start()
        await self.poll_load()
        self._poller = asyncio.create_task(self._poll_forever(), name="sglang-load-poll")

    async def _probe_drafter(self, base_url: str) -> str | None:
        """supervision.py P1/P2 on one greedy completion; raises (P3) when the server does not answer."""
        s = self._supervision
        payload = probe_payload(self.config.served_model_name, s.drafter_probe_max_tokens)
        spec = None
        events = self._client.stream(base_url, "/v1/completions", payload)
        try:
            async for event in events:
                spec = spec_details_of(event) or spec
        finally:
            await events.aclose()
        return probe_verdict(spec, s.drafter_probe_max_tokens, s.drafter_probe_min_accept_length)

    async def _fetch(self, ref) -> Path:
        cfg = self.config
        return await asyncio.to_thread(self._fetcher, ref, cfg.cache_dir, max_workers=cfg.artifact_workers)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        if self._supervisor is not None:
            await self._supervisor.stop()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None
        self._snapshot = LoadSnapshot(healthy=False, engine="sglang")

    def _build_command(self, drafter: bool, port: int) -> list[str]:
        return render_command(
            self.config, self._plans[drafter], model_dir=self._model_dir, draft_dir=self._draft_dir, port=port,
            drafter=drafter,
        )

    # -- protocol ----------------------------------------------------------------------------------
    def load(self) -> LoadSnapshot:
        """The last poll's snapshot, with the prefill backlog as it stands now (SGLang reports none)."""
        return self._snapshot.model_copy(
            update={
                "pending_prefill_tokens": self._backlog.pending_tokens(),
                "prefill_tokens_per_s": self._backlog.tokens_per_s(),
                "cache_generation": self._launches_seen,
            }
        )

    async def check_health(self) -> None:
        """Raise only when the server is beyond repair (crash policy gave up) or stopped; a restart in
        progress is healthy for the replica (it reports `healthy=False` in load() so the router skips it),
        and so is a config error (a new replica would refuse the same arguments; this one says why)."""
        sup = self._supervisor
        if sup is None or sup.state in ("failed", "stopped"):
            state = sup.state if sup else "not started"
            log_path = sup.log_path if sup else None
            raise RuntimeError(f"SGLang server is {state} (log: {log_path})")

    def set_drafter_enabled(self, enabled: bool) -> None:
        if self._supervisor is not None:
            self._supervisor.set_drafter_enabled(enabled)

    @property
    def base_url(self) -> str | None:
        """The server's loopback URL while it serves; None otherwise."""
        sup = self._supervisor
        return sup.base_url if sup is not None and sup.state == "ready" else None

    def supervision_status(self) -> SupervisionStatus | None:
        """The supervisor's status (served path, fallback, config error, counts); None before start()."""
        return self._supervisor.status() if self._supervisor is not None else None

    def describe(self) -> dict:
        sup = self._supervisor
        command = redact(sup.command) if sup else []
        status = sup.status() if sup else None
        return {
            "engine": "sglang",
            "command": command,
            "env_keys": sorted(self.config.env),
            "speculative_algorithm": self.config.speculative_algorithm,
            "path": sup.path if sup else None,
            "state": sup.state if sup else "stopped",
            "fallback_reason": sup.fallback_reason if sup else None,
            "drafter_fallback": status.drafter_fallback if status else False,
            "config_error": status.config_error.model_dump() if status and status.config_error else None,
            "num_launches": sup.num_launches if sup else 0,
            "num_crashes": sup.num_crashes if sup else 0,
            "num_hangs": status.num_hangs if status else 0,
            "num_probe_failures": status.num_probe_failures if status else 0,
            "last_failure": sup.last_failure if sup else None,
            "log_path": str(sup.log_path) if sup else None,
            "model_uri": self.config.target.uri,
            "model_files": {pin.path: pin.sha256 for pin in self.config.target.files},
            "draft_uri": self.config.draft.uri if self.config.draft else None,
            "draft_files": {pin.path: pin.sha256 for pin in self.config.draft.files} if self.config.draft else {},
            "plan": self._current_plan().model_dump() if self._plans else None,
        }

    def _serving(self) -> tuple[str, SGLangClient]:
        """(base URL, client) of the server while it serves; EngineError (503) naming why not."""
        sup, client = self._supervisor, self._client
        if sup is not None and sup.state == "config_error" and sup.config_error is not None:
            raise EngineError(
                f"the SGLang server refused its arguments: {sup.config_error.line}", status=503,
                code="engine_config_error",
            )
        if sup is None or client is None or sup.state != "ready" or sup.draining:
            raise EngineError("the SGLang server is not ready", status=503, code="engine_unavailable")
        return sup.base_url, client

    async def count_prompt_tokens(self, request: GenerateRequest, anthropic_body: dict | None = None) -> int:
        """SGLang's own count of a Messages request (its /v1/messages/count_tokens; mapping.py rule `count`)."""
        if anthropic_body is None:
            raise EngineError("sglang pools count the tokens of Messages requests only", status=400,
                              code="unsupported_parameter")  # fmt: skip
        base_url, client = self._serving()
        try:
            payload = count_payload(anthropic_body, request, self.config.served_model_name)
            answer = await client.count_tokens(base_url, payload)
        except UpstreamError as exc:
            status = exc.status if 400 <= exc.status < 500 else 503
            raise EngineError(f"SGLang answered {exc.status}: {exc}", status=status) from exc
        except httpx.HTTPError as exc:
            raise EngineError(f"SGLang did not answer: {exc!r}", status=503) from exc
        return int(answer["input_tokens"])

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        base_url, client = self._serving()
        path = endpoint_for(request)
        payload = build_payload(request, self.config.served_model_name)
        mapper, done, prefilled = StreamMapper(), False, False
        self._inflight += 1
        self._backlog.submit(request.request_id, request.estimated_prompt_tokens, request.prefix_hashes)
        events = client.stream(base_url, path, payload)
        try:
            try:
                async for event in events:
                    for chunk in mapper.feed(event):
                        if not prefilled and chunk.finish_reason != "error":
                            self._backlog.first(request.request_id)
                            prefilled = True
                        yield chunk
                        if chunk.finish_reason == "error":
                            done = True
                            return
            except UpstreamError as exc:
                done = True
                status = exc.status if 400 <= exc.status < 500 else 503
                raise EngineError(f"SGLang answered {exc.status}: {exc}", status=status) from exc
            except (httpx.HTTPError, ValueError) as exc:  # a dropped connection or an unreadable event
                done = True
                yield Chunk(finish_reason="error", error=f"SGLang stream failed: {exc!r}", error_status=503)
                return
            final = mapper.finish()
            done = True
            if final.usage is not None and final.usage.path == "speculative" and final.usage.verify_steps:
                self._accept_ema = update_ema(self._accept_ema, final.usage.accept_length, self.config.accept_ema_alpha)
            yield final
        finally:
            self._inflight -= 1
            self._backlog.drop(request.request_id)
            await events.aclose()
            if not done:  # cancelled by the consumer: make sure the server stops decoding it
                task = asyncio.create_task(client.abort(base_url, request.request_id))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    # -- load polling ------------------------------------------------------------------------------
    def _current_plan(self) -> CapacityPlan:
        drafter = self._supervisor is not None and self._supervisor.drafter_active and True in self._plans
        return self._plans[bool(drafter)]

    async def poll_load(self) -> LoadSnapshot:
        """One poll of /v1/loads and /metrics into the cached snapshot (the loop calls it every load_poll_s)."""
        sup, client = self._supervisor, self._client
        inputs, ok = LoadInputs(), False
        if sup is not None and client is not None and sup.state == "ready":
            base_url = sup.base_url
            loads, metrics = await asyncio.gather(
                client.loads(base_url), client.metrics(base_url), return_exceptions=True
            )
            if isinstance(loads, dict):
                inputs.loads, ok = loads, True
            if isinstance(metrics, str):
                inputs.gauges = parse_gauges(metrics)
        serving = sup is not None and sup.state == "ready" and not sup.draining
        self._snapshot = build_snapshot(
            inputs, self._current_plan(), healthy=ok and serving, drafter_active=sup is not None and sup.drafter_active,
            accept_ema=self._accept_ema, extra_args=self.config.extra_args,
        )
        if sup is not None and sup.num_launches != self._launches_seen:  # a new server caches nothing yet
            self._launches_seen = sup.num_launches
            self._backlog.forget_cache()
        if self._snapshot.total_kv_tokens > 0:
            self._backlog.resize(self._snapshot.total_kv_tokens, self._snapshot.host_kv_tokens)
        return self.load()

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.load_poll_s)
            try:
                await self.poll_load()
            except Exception:  # a poll must never kill the loop; the snapshot stays as it was
                log.exception("load poll failed")
