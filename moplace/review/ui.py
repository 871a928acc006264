"""`moplace ui`: MLflow's UI on moplace's store, started, waited for, its address printed.

The server is MLflow's own (``python -m mlflow server``) on the same tracking URI the searches
log to, one worker, bound to ``host:port``; its address is printed once it answers, with the
``moplace`` experiment's run list (moplace's columns, in the model-training view). Ctrl-C
stops it. A store that is already a server (an ``http(s)://`` URI) needs no UI of ours: the
same page of it is printed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from ..errors import MoplaceError
from .mlstore import sqlite_file

START_SECONDS = 90.0


def serve(uri: str, host: str, port: int, *, out=sys.stdout, wait_forever: bool = True) -> int:
    if uri.startswith(("http://", "https://")):
        print(f"the tracking store is already a server: open {experiment_link(uri, uri)}",
              file=out, flush=True)
        return 0
    if not 0 < port < 65536:
        raise MoplaceError(f"--port must be 1..65535, got {port}")
    _check_port(host, port)
    db = sqlite_file(uri)
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
               "--host", host, "--port", str(port), "--workers", "1"]
    if db is not None:
        command += ["--default-artifact-root", (db.parent.resolve() / "mlartifacts").as_uri()]
    # no GenAI job runners (eight more processes MLflow would start for nothing moplace logs)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log = tempfile.NamedTemporaryFile("w", prefix="moplace-ui-", suffix=".log", delete=False)
    server = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    address = f"http://{host}:{port}"
    if wait_forever:  # a SIGTERM to us stops the server too (finally below runs)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        _wait_until_up(server, address, log.name)
        print(f"MLflow UI: {experiment_link(uri, address)}  (store {uri}; server log "
              f"{log.name}; Ctrl-C stops it)", file=out, flush=True)
        if not wait_forever:
            return 0
        server.wait()
        return 0 if server.returncode in (0, -2, -15) else 1
    except KeyboardInterrupt:
        return 0
    finally:
        if wait_forever:
            stop(server)


def stop(server) -> None:
    """Stop the server and every process it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(server.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            server.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise MoplaceError(f"cannot serve on {host}:{port} ({exc.strerror or exc}): is "
                               f"another UI running there? pick another with --port") from None


def _wait_until_up(server, address: str, log: str) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_SECONDS:
        if server.poll() is not None:
            with open(log, errors="replace") as f:
                tail = f.read()[-2000:]
            raise MoplaceError(f"MLflow's server exited ({server.returncode}):\n{tail}")
        try:
            with urllib.request.urlopen(f"{address}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    stop(server)
    raise MoplaceError(f"MLflow's server did not answer at {address} within {START_SECONDS:.0f} s")


def experiment_link(uri: str, base: str) -> str:
    """The moplace experiment's run list in the UI at ``base`` (model-training view, moplace's
    columns: `moplace.review.mlstore.ui_link`) when the store at ``uri`` has it, else the UI's
    home in that view. A store logged to before the view existed gets it here."""
    from .mlstore import connect_client, install_view, ui_link
    from .tracking import DEFAULT_EXPERIMENT

    try:
        client = connect_client(uri, must_exist=True)
        exp = client.get_experiment_by_name(DEFAULT_EXPERIMENT)
    except Exception:  # noqa: BLE001 - no store there yet: the UI's home
        return ui_link(base)
    if exp is None:
        return ui_link(base)
    try:
        install_view(client, exp.experiment_id, exp.tags)
    except Exception:  # noqa: BLE001 - a read-only store: the run list without our columns
        pass
    return ui_link(base, exp.experiment_id)
