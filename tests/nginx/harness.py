"""Real servers for the doctor's tests: uvicorn in a thread, and Debian's nginx as a child process.

``nginx_proxy(upstream_port, case)`` writes ``proxy.conf.in`` with the directives of ``CASE.location`` into a
temporary prefix, runs ``/usr/sbin/nginx`` in the foreground as a single process (no master, no daemon, every
path under the prefix, loopback only) and yields its base URL; the process is terminated at the end.

``tests/_uvicorn.serve(app, http=...)`` runs the upstream. The nginx cases pin ``http="h11"``:
h11 answers nginx's HTTP/1.0 upstream requests (nginx's default ``proxy_http_version``) close-delimited,
and that is what lets nginx's proxy buffers hold a stream. uvicorn's httptools protocol (``uvicorn[standard]``)
uses chunked framing even then, and nginx passes every complete chunk on at once, buffering or not, so with it
the buffered cases stream (the doctor then rightly reports streaming).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["HERE", "NGINX", "nginx_proxy"]

HERE = Path(__file__).resolve().parent
NGINX = Path(shutil.which("nginx", path="/usr/sbin:/usr/local/sbin:/usr/bin") or "/usr/sbin/nginx")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(port: int, process: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.02)
    return False


@contextmanager
def nginx_proxy(upstream_port: int, case: str) -> Iterator[str]:
    """nginx in front of ``127.0.0.1:upstream_port`` with the directives of ``HERE/case.location``."""
    location = (HERE / f"{case}.location").read_text()
    with tempfile.TemporaryDirectory(prefix="tokenrelay-nginx-") as prefix:
        # nginx cannot report a port it chose, so pick a free one and retry should another process take it.
        for _attempt in range(3):
            port = _free_port()
            conf = (HERE / "proxy.conf.in").read_text()
            for key, value in {
                "@PREFIX@": prefix,
                "@PORT@": str(port),
                "@UPSTREAM@": str(upstream_port),
                "@LOCATION@": "\n".join(" " * 12 + line for line in location.splitlines()),
            }.items():
                conf = conf.replace(key, value)
            (Path(prefix) / "nginx.conf").write_text(conf)
            command = [str(NGINX), "-p", prefix, "-c", f"{prefix}/nginx.conf", "-e", f"{prefix}/error.log"]
            process = subprocess.Popen(
                [*command, "-g", "daemon off; master_process off;"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # errors go to the error log (-e)
            )
            try:
                if _wait_listening(port, process, timeout=10):
                    yield f"http://127.0.0.1:{port}"
                    return
            finally:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        log = (Path(prefix) / "error.log").read_text() if (Path(prefix) / "error.log").exists() else ""
        raise RuntimeError(f"nginx did not start: {log[-2000:]}")
