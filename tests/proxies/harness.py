"""Real proxies for the doctor's tests: Debian's Apache httpd, HAProxy, Caddy and Varnish as child processes.

Each context manager writes its ``*.in`` template with the case's directives into a temporary directory,
starts the proxy in the foreground on a free loopback port in front of ``127.0.0.1:upstream_port``, waits
until it listens and yields its base URL; the process is terminated at the end. A port taken by
someone else between choosing and binding is retried. ``tests/nginx/harness.py`` starts nginx the same way.

``binary(name)`` is the proxy's path, or None when it is not installed (the tests skip, saying which Debian
package to install; CI installs them all through the Makefile's SYSTEM_PACKAGES).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "HERE",
    "apache_proxy",
    "binary",
    "caddy_proxy",
    "fill",
    "haproxy_proxy",
    "run_proxy",
    "varnish_proxy",
]

HERE = Path(__file__).resolve().parent
_SEARCH = "/usr/sbin:/usr/local/sbin:/usr/bin:/usr/local/bin"
_APACHE_MODULES = Path("/usr/lib/apache2/modules")


def binary(name: str) -> str | None:
    """The executable called ``name`` (``apache2``, ``haproxy``, ``caddy``, ``varnishd``), or None."""
    return shutil.which(name, path=_SEARCH)


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


def fill(template: Path, values: dict[str, str]) -> str:
    """The text of ``template`` with each ``@KEY@`` replaced by ``values[KEY]``."""
    text = template.read_text()
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


Start = Callable[[str, int], tuple[list[str], dict[str, str]]]


@contextmanager
def run_proxy(name: str, start: Start, *, timeout: float = 15.0) -> Iterator[str]:
    """Start a proxy with ``start(prefix, port) -> (argv, env)`` until it listens; yield its base URL.

    ``prefix`` is a fresh temporary directory for its files; whatever it writes to ``*.log`` there is shown
    when it does not start.
    """
    with tempfile.TemporaryDirectory(prefix=f"tokenrelay-{name}-") as prefix:
        os.chmod(prefix, 0o755)  # Apache's and Varnish's unprivileged children read their files here
        log = Path(prefix) / "output.log"
        for _attempt in range(3):
            port = _free_port()
            argv, env = start(prefix, port)
            with log.open("ab") as out:
                process = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=prefix
                )
            try:
                if _wait_listening(port, process, timeout):
                    yield f"http://127.0.0.1:{port}"
                    return
            finally:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        errors = "".join(p.read_text(errors="replace")[-2000:] for p in Path(prefix).glob("*.log"))
        raise RuntimeError(f"{name} did not start: {errors}")


@contextmanager
def apache_proxy(upstream_port: int, case: str) -> Iterator[str]:
    """Apache httpd (mod_proxy_http, mod_deflate loaded) with ``case``'s directives appended."""
    exe = binary("apache2")
    assert exe is not None
    user = "User www-data\nGroup www-data" if os.geteuid() == 0 else ""

    def start(prefix: str, port: int) -> tuple[list[str], dict[str, str]]:
        values = {
            "PREFIX": prefix,
            "PORT": str(port),
            "UPSTREAM": str(upstream_port),
            "MODULES": str(_APACHE_MODULES),
            "USER": user,
            "CASE": case,
        }
        (Path(prefix) / "httpd.conf").write_text(fill(HERE / "apache.conf.in", values))
        return [exe, "-d", prefix, "-f", f"{prefix}/httpd.conf", "-DFOREGROUND"], {}

    with run_proxy("apache", start) as url:
        yield url


@contextmanager
def haproxy_proxy(upstream_port: int, case: str) -> Iterator[str]:
    """HAProxy in HTTP mode with ``case``'s lines in the backend section."""
    exe = binary("haproxy")
    assert exe is not None

    def start(prefix: str, port: int) -> tuple[list[str], dict[str, str]]:
        lines = "\n".join("    " + line for line in case.splitlines())
        values = {"PORT": str(port), "UPSTREAM": str(upstream_port), "CASE": lines}
        (Path(prefix) / "haproxy.cfg").write_text(fill(HERE / "haproxy.cfg.in", values))
        return [exe, "-f", f"{prefix}/haproxy.cfg", "-db"], {}

    with run_proxy("haproxy", start) as url:
        yield url


@contextmanager
def caddy_proxy(upstream_port: int, case: str) -> Iterator[str]:
    """Caddy with ``case``'s site directives; ``{upstream}`` in them is the upstream's address."""
    exe = binary("caddy")
    assert exe is not None

    def start(prefix: str, port: int) -> tuple[list[str], dict[str, str]]:
        site = case.replace("{upstream}", f"127.0.0.1:{upstream_port}")
        values = {"PORT": str(port), "CASE": "\n".join("\t" + line for line in site.splitlines())}
        (Path(prefix) / "Caddyfile").write_text(fill(HERE / "Caddyfile.in", values))
        env = {"HOME": prefix, "XDG_DATA_HOME": f"{prefix}/data", "XDG_CONFIG_HOME": f"{prefix}/config"}
        return [exe, "run", "--config", f"{prefix}/Caddyfile", "--adapter", "caddyfile"], env

    with run_proxy("caddy", start) as url:
        yield url


@contextmanager
def varnish_proxy(upstream_port: int, case: str) -> Iterator[str]:
    """Varnish (built-in VCL otherwise) with ``case`` as the body of ``vcl_backend_response``."""
    exe = binary("varnishd")
    assert exe is not None

    def start(prefix: str, port: int) -> tuple[list[str], dict[str, str]]:
        values = {
            "UPSTREAM": str(upstream_port),
            "CASE": "\n".join("    " + line for line in case.splitlines()),
        }
        (Path(prefix) / "varnish.vcl").write_text(fill(HERE / "varnish.vcl.in", values))
        workdir = f"{prefix}/work"
        argv = [exe, "-F", "-j", "none", "-n", workdir, "-a", f"127.0.0.1:{port}"]
        argv += ["-f", f"{prefix}/varnish.vcl", "-s", "malloc,16m", "-T", "none"]
        return argv, {}

    with run_proxy("varnish", start, timeout=30.0) as url:
        yield url
