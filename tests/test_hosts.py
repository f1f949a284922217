"""Multi-node runs across two hosts on this machine (tests/netns_hosts.py: a network namespace
and a hostname per host, joined by a bridge): the fixture itself and its leak check, DDP across
the hosts for both frameworks, and the watchdog when a rank on the other host freezes or the
other host dies. Skipped, with the reason, where namespaces cannot be made (not root, no
CAP_NET_ADMIN, no `ip`)."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from pathlib import Path

import jsonschema
import pytest

from tests import netns_hosts
from tests.helpers import REPO, live_dir, run_env, runner_argv

SCHEMA = json.loads((REPO / "runners" / "schemas" / "result.schema.json").read_text())
RUN_TIMEOUT_S = 240
_ports = itertools.count(29600)  # a fresh port per job: the namespaces are this session's own


@pytest.fixture(scope="module")
def hosts():
    reason = netns_hosts.why_not()
    if reason:
        pytest.skip(reason)
    made = netns_hosts.Hosts(2)
    try:
        made.start()
    except netns_hosts.Unavailable as exc:
        pytest.skip(str(exc))
    try:
        yield made
    finally:
        made.stop()
        left = made.leftovers()
        assert not left, f"the hosts fixture left {left}"


def test_hosts_are_two_machines_on_one_link(hosts):
    h0, h1 = hosts.hosts
    names = [hosts.run(h, ["hostname"]).stdout.strip() for h in (h0, h1)]
    assert names == [h0.hostname, h1.hostname] and names[0] != names[1]
    # Each host has loopback and its link address, and only the link's subnet is routed: test
    # traffic cannot leave the fixture.
    for h in (h0, h1):
        addrs = hosts.run(h, ["ip", "-o", "-4", "addr"]).stdout
        assert f"inet {h.address}/24" in addrs and "127.0.0.1" in addrs
        routes = hosts.run(h, ["ip", "route"]).stdout.strip().splitlines()
        assert len(routes) == 1 and routes[0].startswith(f"{hosts.subnet}.0/24 dev {netns_hosts.IFNAME}"), routes
    # TCP from host 0 to host 1's address, by its name.
    server = hosts.popen(h1, ["python3", "-c", "import socket; s = socket.create_server(('', 5999)); "
                              "s.settimeout(20); c, _ = s.accept(); c.sendall(socket.gethostname().encode())"],
                         stdout=subprocess.PIPE, text=True)
    reply = ""
    for _ in range(50):  # until the server listens: at most 50 tries, 5 s
        got = hosts.run(h0, ["python3", "-c", f"import socket; print(socket.create_connection(('{h1.hostname}', "
                             "5999), timeout=2).recv(100).decode())"])
        if got.returncode == 0:
            reply = got.stdout.strip()
            break
        time.sleep(0.1)
    assert server.wait(timeout=20) == 0 and reply == h1.hostname


def test_teardown_leaves_nothing_even_after_a_failure():
    """A second set of hosts, a process left running in each (one in a process group of its
    own, as torchrun starts its ranks) and a failure inside the `with`: stop() still removes
    every process, link and namespace."""
    reason = netns_hosts.why_not()
    if reason:
        pytest.skip(reason)
    made = netns_hosts.Hosts(2, prefix=f"{netns_hosts.Hosts().prefix}x")
    pids = []
    with pytest.raises(RuntimeError):
        try:
            made.start()
            for h in made.hosts:
                made.popen(h, ["sleep", "300"])
                # detached: a new session inside the host, out of the group the fixture tracks
                made.popen(h, ["setsid", "sleep", "301"])
            time.sleep(0.5)
            pids = [p for h in made.hosts for p in made.pids(h)]
            assert len(pids) >= 4, pids
            raise RuntimeError("a test failed with processes running")
        finally:
            made.stop()
    assert made.leftovers() == []
    assert not [p for p in pids if Path(f"/proc/{p}").exists() and
                Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
