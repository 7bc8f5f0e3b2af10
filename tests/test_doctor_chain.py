"""A chain of real hops probed in one run: tokenrelay's server (origin), HAProxy in front of it (the internal
load balancer), nginx in front of that (the public URL). ``tokenrelay doctor ORIGIN --via LB --via PUBLIC``
must say which hop adds the hold and give that hop's fix."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from nginx.harness import NGINX, nginx_proxy
from proxies.apps import relay_upstream
from proxies.harness import binary, haproxy_proxy
from tokenrelay import cli
from tokenrelay.doctor._report import Status
from tokenrelay.doctor.probe import DoctorOptions, run_chain

pytestmark = pytest.mark.skipif(
    binary("haproxy") is None or not NGINX.is_file(),
    reason="HAProxy and nginx are needed (apt-get install -y haproxy nginx; the Makefile installs them)",
)

OPTIONS = DoctorOptions(events=24, cadence_ms=50.0, cancel=False)


@pytest.fixture(scope="module")
def origin() -> Iterator[int]:
    with relay_upstream() as port:
        yield port


def port(url: str) -> int:
    return int(urlsplit(url).port or 0)


async def test_the_hop_that_adds_the_hold_is_named_with_its_fix(origin: int) -> None:
    with haproxy_proxy(origin, "") as lb, nginx_proxy(port(lb), "defaults") as public:
        chain = await run_chain([f"http://127.0.0.1:{origin}", lb, public], OPTIONS)
    first, second, third = chain.reports
    assert first.check("timing").status is Status.PASS, first.render_text()
    # (nginx asks HAProxy over HTTP/1.0, which HAProxy answers without its send delay: the public hop here
    # may stream again; the chain's verdict is about where the hold starts.)
    assert second.check("timing").status is Status.FAIL and third.mode == "diagnostics"
    seeds = {r.check("probe").message.split("seed ")[1].split(" ")[0] for r in chain.reports}
    assert len(seeds) == 1  # one seed for every hop: the same writes compared
    verdict = chain.verdict
    assert verdict.status is Status.FAIL and chain.exit_status == 1
    assert verdict.message.startswith(f"the hold starts at hop 2 ({lb}); hop 1 ")
    assert verdict.hop is not None and verdict.hop.startswith(
        f"the hop between http://127.0.0.1:{origin} and {lb}"
    )
    assert verdict.fix is not None and "option http-no-delay" in verdict.fix


def test_cli_via_probes_each_hop_and_exits_1_then_0_once_fixed(
    origin: int, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    base = f"http://127.0.0.1:{origin}"
    args = ["--events", "20", "--no-cancel", "--seed", "4"]
    with haproxy_proxy(origin, "") as lb, nginx_proxy(port(lb), "defaults") as public:
        assert cli.main(["doctor", base, "--via", lb, "--via", public, *args]) == 1
    out = capsysbinary.readouterr().out.decode("utf-8")
    assert f"FAIL  chain  the hold starts at hop 2 ({lb})" in out and out.rstrip().endswith("FAILED")
    assert out.count("tokenrelay doctor http://127.0.0.1:") == 3
    with (
        haproxy_proxy(origin, "option http-no-delay") as lb,
        nginx_proxy(port(lb), "defaults") as public,
    ):
        assert cli.main(["doctor", base, "--via", lb, "--via", public, *args, "--json"]) == 0
    data = json.loads(capsysbinary.readouterr().out)
    assert data["ok"] is True and data["verdict"]["status"] != "FAIL"  # "all 3 hops stream" (a loaded machine
    # may make one run irregular: a WARN, never a FAIL)
    assert [hop["url"] for hop in data["hops"]] == [base, lb, public]
