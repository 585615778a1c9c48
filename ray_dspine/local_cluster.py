"""The private single-node Ray cluster of the local stack: reachable from this machine only, and only with its token.

Rules:
  loopback   every Ray listener binds loopback. The head starts with `--node-ip-address=127.0.0.1` and
             RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: without that variable Ray 2.60 rewrites 127.0.0.1 to the
             machine's reachable address (ray/_private/services.py `resolve_ip_for_localhost`), and then the GCS
             and raylet bind every interface, the Ray Client server, dashboard agent and runtime-env agent bind
             that address, and the Prometheus endpoints of the autoscaler, dashboard and agent bind 0.0.0.0
             without any authentication. With it, each of them binds 127.0.0.1 (or ::ffff:127.0.0.1). One
             exception Ray 2.60 hard-codes: each Serve replica's inter-deployment gRPC server binds [::]
             (ray/serve/_private/replica.py); it carries Ray's token interceptor, so it refuses a call without
             the token (tests/serve/test_local_exposure.py checks every listener either way).
  token      Ray's token auth is on as well (RAY_AUTH_MODE=token): GCS, raylet and the Ray Client server
             refuse a call without `authorization: Bearer <token>`. The token is 256 random bits in hex, kept in
             runs/ray/auth_token (or DSPINE_RAY_TOKEN_FILE), created with mode 0600 in a 0700 folder and made
             0600 again if found wider; Ray reads it through RAY_AUTH_TOKEN_PATH. It is never printed or logged.
  lifetime   the head runs as `ray start --head --block` in its own process session; stopping sends it SIGTERM
             (Ray then stops the processes it started) and SIGKILL to any of its processes still alive after
             STOP_GRACE_S. Only processes started here are signalled: no `ray stop`, which would end every
             Ray cluster of the machine. Once it is gone, Ray's current-cluster record is removed if it names
             this head (a later `ray.init()` without an address would otherwise try to join the stopped head).
  serving    `python -m ray_dspine.local_cluster [CONFIG]` starts the head, waits (at most HEAD_START_TIMEOUT_S)
             for its GCS port, runs `serve run` on CONFIG against it and stops both when `serve run` ends, on
             Ctrl-C (SIGINT, handled even if the process started with it ignored, e.g. as `scripts/serve-local &`
             in a script) or on SIGTERM, and `serve run` then gets SIGINT, its graceful stop. The exit status
             is `serve run`'s when it ends by itself, 130 on a stop.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOKEN_FILE = REPO / "runs" / "ray" / "auth_token"
DEFAULT_PORT = 6390
DEFAULT_CLIENT_PORT = 10001
HEAD_START_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
BIN = Path(sys.executable).parent


def ensure_token(path: Path | None = None) -> Path:
    """The token file, created (0600, folder 0700) when missing or empty; a wider mode is narrowed to 0600."""
    path = Path(path or os.environ.get("DSPINE_RAY_TOKEN_FILE") or DEFAULT_TOKEN_FILE)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists() or path.stat().st_size == 0:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    if stat.S_IMODE(path.stat().st_mode) != 0o600:
        os.chmod(path, 0o600)
    return path


def ray_env(token_path: Path, base: dict | None = None) -> dict:
    """The environment for every Ray process of the local cluster and its drivers (the `loopback` and `token` rules)."""
    env = dict(os.environ if base is None else base)
    env.pop("RAY_AUTH_TOKEN", None)  # the file is the one source of the token
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(token_path),
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
    )
    return env


@dataclass
class LocalHead:
    process: subprocess.Popen
    port: int
    env: dict
    temp_dir: str | None = None
    started: set[int] = field(default_factory=set)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pids(self) -> set[int]:
        """The head launcher and every process under it (what stop() signals)."""
        try:
            root = psutil.Process(self.process.pid)
            found = {root.pid} | {child.pid for child in root.children(recursive=True)}
        except psutil.NoSuchProcess:
            found = set()
        self.started |= found
        return found

    def stop(self) -> None:
        self.pids()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        for pid in sorted(self.started):
            try:
                proc = psutil.Process(pid)
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()
            except psutil.NoSuchProcess:
                pass
        if self.process.poll() is None:
            self.process.wait(timeout=STOP_GRACE_S)
        forget_address(self.address, self.temp_dir)


def forget_address(address: str, temp_dir: str | None) -> None:
    """`ray start` records its head in Ray's current-cluster file, and a later `ray.init()` without an address
    joins whatever that file names; a stopped head must not be found there, so remove the record if it is ours."""
    from ray._common.utils import get_ray_address_file

    record = Path(get_ray_address_file(temp_dir))
    try:
        if record.read_text().strip() == address:
            record.unlink()
    except OSError:
        pass


def start_head(
    *, port: int = DEFAULT_PORT, client_port: int = DEFAULT_CLIENT_PORT, token_path: Path | None = None,
    num_cpus: int | None = None, temp_dir: str | None = None, extra: list[str] | None = None,
    log_path: Path | None = None,
) -> LocalHead:
    """Start the head (the module's rules) and return once its GCS port accepts connections."""
    env = ray_env(ensure_token(token_path))
    args = [
        str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
        f"--ray-client-server-port={client_port}", "--include-dashboard=false", "--disable-usage-stats",
    ]
    if num_cpus is not None:
        args.append(f"--num-cpus={num_cpus}")
    if temp_dir is not None:
        args.append(f"--temp-dir={temp_dir}")
    args += extra or []
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        process = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        if log_path:
            log.close()
    head = LocalHead(process, port, env, temp_dir=temp_dir)
    try:
        _wait_for_gcs(head)
    except BaseException:  # a failed start, or a stop (Ctrl-C, SIGTERM) while starting
        head.stop()
        raise
    return head


def _wait_for_gcs(head: LocalHead) -> None:
    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while time.monotonic() < deadline:
        head.pids()
        if head.process.poll() is not None:
            raise RuntimeError(f"`ray start` exited with status {head.process.returncode} before the head was up")
        try:
            with socket.create_connection(("127.0.0.1", head.port), timeout=1):
                return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the Ray head did not open 127.0.0.1:{head.port} within {HEAD_START_TIMEOUT_S:.0f} s")


def handle_stop_signals() -> None:
    """SIGTERM and SIGINT both stop the stack (as KeyboardInterrupt). SIGINT is set even when this process
    started with it ignored, as a non-interactive shell starts a background job: an ignored signal stays
    ignored across exec, so `serve run` would inherit it and could not be stopped gracefully."""

    def stop_on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def serve(config: str) -> int:
    """Start the head, `serve run` CONFIG on it, stop both (the `serving` rule)."""
    port = int(os.environ.get("DSPINE_RAY_PORT", DEFAULT_PORT))
    client_port = int(os.environ.get("DSPINE_RAY_CLIENT_PORT", DEFAULT_CLIENT_PORT))

    handle_stop_signals()  # before the head exists, so a stop never orphans it
    try:
        head = start_head(port=port, client_port=client_port)
    except KeyboardInterrupt:
        return 130
    runner = None
    try:
        runner = subprocess.Popen([str(BIN / "serve"), "run", f"--address={head.address}", config], env=head.env)
        return runner.wait()
    except KeyboardInterrupt:
        return 130
    finally:
        if runner is not None and runner.poll() is None:
            runner.send_signal(signal.SIGINT)
            try:
                runner.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                runner.kill()
        head.stop()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1] if len(sys.argv) > 1 else "clusters/local.yaml"))
