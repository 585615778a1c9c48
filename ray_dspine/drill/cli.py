"""`ray-dspine drill`: run the operator's drill against a running stack; print a table, write a receipt.

Exit status: 0 when every scenario that ran passed, 1 when one failed (or the endpoint cannot be reached),
2 for bad usage (argparse's `error: argument --flag: ...`). Progress goes to stderr, the table to stdout,
the receipt (command line, endpoint, git commit, times, per-scenario figures, RSS before/after, verdict) to
`--json`. The API key is read from the environment and never written anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from ..bench.endpoint import API_KEY_ENV, EndpointUnreachable, fetch_models
from ..bench.receipt import GitState, git_state, utc_iso
from ..cli_errors import CliError, cli_errors, flag_error
from .context import DrillContext
from .kill import Killer, RayKiller, run_kill
from .result import Progress, ScenarioResult, render_table
from .rss import RssSnapshot, snapshot
from .scenarios import run_burst, run_concurrency, run_corpus, run_disconnect
from .settings import FLAGS, SCENARIOS, DrillSettings
from .soak import run_soak


class DrillReceipt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command_line: list[str]
    endpoint: str
    model: str | None
    git: GitState
    started_at: str = Field(description="UTC, ISO 8601.")
    ended_at: str = Field(description="UTC, ISO 8601.")
    settings: dict[str, JsonValue] = Field(description="Drill settings (the API key left out).")
    scenarios: list[ScenarioResult]
    rss_before: RssSnapshot | None = Field(description="Local Ray cluster RSS per process at the drill's start.")
    rss_after: RssSnapshot | None = Field(description="... and at its end; None when no local Ray cluster runs.")
    passed: bool
    error: str | None = Field(default=None, description="Why the drill stopped early, if it did.")


def _scenario_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [n for n in names if n not in SCENARIOS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown scenario(s) {', '.join(map(repr, unknown)) or '(none given)'}; choose from {','.join(SCENARIOS)}"
        )
    return names


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("drill", help="drill a running stack: bad input, load, disconnects, a kill, a soak",
                              description=__doc__.splitlines()[0])
    p.add_argument("--endpoint", required=True, help="base URL of the stack, e.g. http://127.0.0.1:8000")
    p.add_argument("--api-key-env", default=None, metavar="NAME",
                   help=f"environment variable holding the API key (default {API_KEY_ENV}, used when set)")
    p.add_argument("--model", help="model id (default: the first id of /v1/models)")
    p.add_argument("--ray-address", help="Ray address for the kill scenario (with the local stack: "
                   "127.0.0.1:6390 and RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=runs/ray/auth_token)")
    p.add_argument("--only", type=_scenario_list, help=f"comma-separated scenarios (default: {','.join(SCENARIOS)}; "
                   "kill only with --ray-address)")
    p.add_argument("--concurrency", type=int, default=32, help="concurrent streams (default 32)")
    p.add_argument("--burst", type=int, default=200, help="requests sent at once by the burst (default 200)")
    p.add_argument("--client-timeout-s", type=float, default=30.0, help="timeout of every request, s (default 30)")
    p.add_argument("--disconnects", type=int, default=20, help="clients that hang up after one chunk (default 20)")
    p.add_argument("--kill-pool", default="spec", help="pool whose replica the kill scenario kills (default spec)")
    p.add_argument("--kill-streams", type=int, default=16, help="streams open at the kill (default 16)")
    p.add_argument("--soak-minutes", type=float, default=2.0, help="soak length, minutes (default 2; 0.05 = 3 s)")
    p.add_argument("--soak-load", type=float, default=0.8, help="soak rate as a share of measured capacity (0.8)")
    p.add_argument("--max-tokens", type=int, default=32, help="max_tokens of normal requests (default 32)")
    p.add_argument("--max-request-bytes", type=int, default=None,
                   help="the stack's request body limit, for the corpus's size cases (default: the server's default)")
    p.add_argument("--seed", type=int, default=0, help="seed of the soak's arrivals (default 0)")
    p.add_argument("--json", type=Path, help="write the JSON receipt here")
    p.set_defaults(func=run)
    return p


def settings_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> DrillSettings:
    environ = os.environ if environ is None else environ
    key_env = args.api_key_env or API_KEY_ENV
    api_key = environ.get(key_env) or None
    if args.api_key_env is not None and api_key is None:
        raise CliError(f"argument --api-key-env: environment variable {key_env} is not set; export it or drop the flag")
    if args.only and "kill" in args.only and not args.ray_address:
        raise CliError("argument --ray-address: the kill scenario needs it; give it or leave kill out of --only")
    if args.only and "soak" in args.only and "concurrency" not in args.only:
        raise CliError("argument --only: soak runs at a share of the capacity concurrency measures; add concurrency")
    if args.json is not None and (args.json.is_dir() or not os.access(args.json.parent if args.json.parent.exists()
                                                                      else Path.cwd(), os.W_OK)):
        raise CliError(f"argument --json: cannot write {args.json}; name a file in a writable folder")
    values = {name: getattr(args, flag.lstrip("-").replace("-", "_")) for name, flag in FLAGS.items()
              if flag != "--json"}
    values["json_path"] = args.json
    values = {k: v for k, v in values.items() if v is not None}
    try:
        return DrillSettings(api_key=api_key, **values)
    except ValidationError as exc:
        raise flag_error(exc, FLAGS) from None


@cli_errors
def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    return asyncio.run(drill(settings, command_line=sys.argv))


def _connection_limits() -> httpx.Limits:
    return httpx.Limits(max_connections=None, max_keepalive_connections=64)


async def drill(
    settings: DrillSettings,
    *,
    command_line: list[str],
    rss: Callable[[], RssSnapshot | None] = snapshot,
    killer: Killer | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> int:
    """Run the selected scenarios in order; print the table; write the receipt; return the exit status."""
    started = wall_clock()
    rss_before = await asyncio.to_thread(rss)
    results: list[ScenarioResult] = []
    error = None
    model = settings.model
    async with httpx.AsyncClient(transport=transport, limits=_connection_limits(), timeout=None) as http:
        try:
            if model is None:
                models = await asyncio.wait_for(fetch_models(http, settings.endpoint, settings.api_key),
                                                settings.client_timeout_s)
                if not models:
                    raise EndpointUnreachable(f"{settings.endpoint}/v1/models lists no model; pass --model")
                model = models[0]
        except (EndpointUnreachable, TimeoutError, ValueError) as exc:
            error = f"cannot read the model list: {exc}"
        if error is None:
            ctx = DrillContext(settings=settings, http=http, model=model, progress=Progress(clock=clock), clock=clock)
            for name in SCENARIOS:
                if name in settings.only:
                    results.append(await _run_one(name, ctx, rss, killer))
                else:
                    why = "needs --ray-address" if name == "kill" and settings.ray_address is None else "not in --only"
                    results.append(ScenarioResult(name=name, passed=None, reason=why))
    rss_after = await asyncio.to_thread(rss)
    passed = error is None and all(r.passed is not False for r in results)
    receipt = DrillReceipt(
        command_line=list(command_line), endpoint=settings.endpoint, model=model,
        git=await asyncio.to_thread(git_state, Path(__file__).resolve().parent),
        started_at=utc_iso(started), ended_at=utc_iso(wall_clock()),
        settings=json.loads(settings.model_dump_json(exclude={"api_key"})),
        scenarios=results, rss_before=rss_before, rss_after=rss_after, passed=passed, error=error,
    )
    if error is not None:
        print(f"drill: {error}", file=sys.stderr)
    if results:
        print(render_table(results))
    if settings.json_path is not None:
        try:
            settings.json_path.parent.mkdir(parents=True, exist_ok=True)
            settings.json_path.write_text(receipt.model_dump_json(indent=2) + "\n")
        except OSError as exc:
            print(f"drill: cannot write the receipt {settings.json_path}: {exc}", file=sys.stderr)
            return 1
    return 0 if passed else 1


async def _run_one(name: str, ctx: DrillContext, rss, killer: Killer | None) -> ScenarioResult:
    """One scenario; a fault of the drill itself fails that scenario (named) and lets the others run."""
    try:
        return await _dispatch(name, ctx, rss, killer)
    except Exception as exc:  # noqa: BLE001 - reported in the table and the receipt
        result = ScenarioResult(name=name, passed=False)
        result.reason = f"the drill could not run it: {type(exc).__name__}: {exc}"
        return result


async def _dispatch(name: str, ctx: DrillContext, rss, killer: Killer | None) -> ScenarioResult:
    s = ctx.settings
    if name == "corpus":
        return await run_corpus(ctx)
    if name == "concurrency":
        return await run_concurrency(ctx)
    if name == "burst":
        return await run_burst(ctx)
    if name == "disconnect":
        return await run_disconnect(ctx)
    if name == "kill":
        return await run_kill(ctx, killer or RayKiller(s.ray_address))
    return await run_soak(ctx, rss)
