"""Real servers for the doctor's tests: uvicorn in a thread, and Debian's nginx as a child process.

``nginx_proxy(upstream_port, case)`` writes ``proxy.conf.in`` with the directives of ``CASE.location`` into a
temporary prefix, runs ``/usr/sbin/nginx`` in the foreground as a single process (no master, no daemon, every
path under the prefix, loopback only) and yields its base URL; the process is terminated at the end. It is
started like the other proxies, by ``tests/proxies/harness.run_proxy``.

``tests/_uvicorn.serve(app, http=...)`` runs the upstream. The nginx cases pin ``http="h11"``:
h11 answers nginx's HTTP/1.0 upstream requests (nginx's default ``proxy_http_version``) close-delimited,
and that is what lets nginx's proxy buffers hold a stream. uvicorn's httptools protocol (``uvicorn[standard]``)
uses chunked framing even then, and nginx passes every complete chunk on at once, buffering or not, so with it
the buffered cases stream (the doctor then rightly reports streaming).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from proxies.harness import fill, run_proxy

__all__ = ["HERE", "NGINX", "nginx_proxy"]

HERE = Path(__file__).resolve().parent
NGINX = Path(shutil.which("nginx", path="/usr/sbin:/usr/local/sbin:/usr/bin") or "/usr/sbin/nginx")


@contextmanager
def nginx_proxy(upstream_port: int, case: str) -> Iterator[str]:
    """nginx in front of ``127.0.0.1:upstream_port`` with the directives of ``HERE/case.location``."""
    location = (HERE / f"{case}.location").read_text()

    def start(prefix: str, port: int) -> tuple[list[str], dict[str, str]]:
        values = {
            "PREFIX": prefix,
            "PORT": str(port),
            "UPSTREAM": str(upstream_port),
            "LOCATION": "\n".join(" " * 12 + line for line in location.splitlines()),
        }
        (Path(prefix) / "nginx.conf").write_text(fill(HERE / "proxy.conf.in", values))
        # Errors go to the error log (-e), shown by run_proxy when nginx does not start.
        command = [str(NGINX), "-p", prefix, "-c", f"{prefix}/nginx.conf", "-e", f"{prefix}/error.log"]
        return [*command, "-g", "daemon off; master_process off;"], {}

    with run_proxy("nginx", start, timeout=10.0) as url:
        yield url
