"""``python -m benchmarks.fake_apiserver``: the fake API server in the foreground, for a
benchmark that wants it in a separate process."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from benchmarks.fake_apiserver.server import FakeApiServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fake_apiserver",
        description="Run the fake Kubernetes API server in the foreground.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--kubeconfig-out", type=Path, help="write a kubeconfig here")
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="sleep this long in every non-watch request"
    )
    parser.add_argument(
        "--cpu-ms",
        type=float,
        default=0.0,
        help="burn this much CPU in every non-watch request, on any core, as a real API "
        "server's handler and etcd write would",
    )
    parser.add_argument(
        "--history", type=int, default=10_000, help="watch events retained per resource"
    )
    parser.add_argument("--bookmark-interval-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    server = FakeApiServer(
        args.host,
        args.port,
        history=args.history,
        bookmark_interval_s=args.bookmark_interval_s,
        latency_s=args.latency_ms / 1000.0,
        cpu_ms_per_request=args.cpu_ms,
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    server.start()
    if args.kubeconfig_out is not None:
        server.write_kubeconfig(args.kubeconfig_out)
    print(server.url, flush=True)
    try:
        while not done.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
