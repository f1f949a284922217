"""N test "hosts" on this machine: one network namespace per host, each with its own hostname,
joined by a bridge, with addresses on those links only. Made and removed by the tests (root).

Layout of a session with prefix P (unique per process: `gn<pid>`):
- namespace P-sw holds the bridge `br0`, the switch; nothing runs in it;
- namespace P-h<i> is host i: `lo` up and `gnlink` (one end of a veth pair whose other end is on
  the bridge) with 10.231.<S>.<10+i>/24, S chosen per session. No default route: a packet to
  any other address fails inside the namespace, so test traffic cannot leave the fixture;
- /etc/netns/P-h<i>/hosts names every host (`ip netns exec` mounts it over /etc/hosts), and an
  empty resolv.conf: host names resolve as on a cluster, and no DNS query is tried.

A process runs inside a host through `ip netns exec NS unshare --uts sh -c 'hostname H; exec ...'`
(its own UTS namespace, the host's name). Teardown kills every process of every namespace (the
process groups started here, then whatever `ip netns pids` still lists there, by PID), then
deletes the namespaces, which deletes their links. Root's own network is never touched.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

IFNAME = "gnlink"  # the hosts' link interface: deliberately not eth0, so a default can't pass for it
ETC_NETNS = Path("/etc/netns")


class Unavailable(Exception):
    """Why this machine cannot make the hosts (the tests skip with it)."""


def _ip(*args, check=True, timeout=10) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=timeout)


def why_not() -> str | None:
    """None when network namespaces can be made here, else the reason."""
    if os.geteuid() != 0:
        return "network-namespace hosts need root (ip netns add)"
    for tool in ("ip", "unshare"):
        if shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin") is None:
            return f"`{tool}` is not installed (iproute2 / util-linux)"
    probe = f"gn{os.getpid()}-probe"
    try:
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot make a network namespace here (no CAP_NET_ADMIN?): {made.stderr.strip()}"
        uts = subprocess.run(["ip", "netns", "exec", probe, "unshare", "--uts", "sh", "-c", "hostname gnprobe"],
                             capture_output=True, text=True, timeout=10)
        if uts.returncode != 0:
            return f"cannot give a namespace its own hostname (unshare --uts): {uts.stderr.strip()}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot make a network namespace here: {exc}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Host:
    index: int
    netns: str
    hostname: str
    address: str


@dataclass
class Hosts:
    """`n` hosts; `start()` makes them, `stop()` removes everything (also at interpreter exit)."""

    n: int = 2
    prefix: str = field(default_factory=lambda: f"gn{os.getpid()}")
    hosts: list = field(default_factory=list)
    groups: list = field(default_factory=list)  # process-group ids this fixture started, not yet stopped
    started: list = field(default_factory=list)  # every process-group id it ever started
    made: list = field(default_factory=list)  # namespaces made, in order
    inodes: set = field(default_factory=set)  # their identities: found in /proc/PID/ns/net even once unnamed

    def __post_init__(self):
        self.subnet = f"10.231.{os.getpid() % 250 + 1}"
        self.switch = f"{self.prefix}-sw"

    # -- making ----------------------------------------------------------------------------
    def start(self) -> "Hosts":
        atexit.register(self.stop)
        try:
            self._make()
        except (OSError, subprocess.SubprocessError) as exc:
            err = getattr(exc, "stderr", "") or ""
            self.stop()
            raise Unavailable(f"could not make the hosts: {exc} {err.strip()}") from exc
        return self

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.made.append(name)
        self.inodes.add(os.stat(f"/run/netns/{name}").st_ino)
        _ip("-n", name, "link", "set", "lo", "up")

    def _make(self) -> None:
        self._netns(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        names = [(f"{self.prefix}-h{i}", f"{self.prefix}h{i}", f"{self.subnet}.{10 + i}") for i in range(self.n)]
        for i, (ns, hostname, address) in enumerate(names):
            self._netns(ns)
            # Both ends are made inside the switch's namespace, so none ever exists in root's.
            _ip("-n", self.switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", IFNAME,
                "netns", ns)
            _ip("-n", self.switch, "link", "set", f"p{i}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", IFNAME)
            _ip("-n", ns, "link", "set", IFNAME, "up")
            etc = ETC_NETNS / ns
            etc.mkdir(parents=True, exist_ok=True)
            # A host's own name on 127.0.1.1, as Debian's installer writes it: the classic trap
            # where a process binding "its hostname's address" binds loopback.
            (etc / "hosts").write_text("127.0.0.1 localhost\n" + f"127.0.1.1 {hostname}\n" + "".join(
                f"{a} {h}\n" for _, h, a in names if h != hostname))
            (etc / "resolv.conf").write_text("")
            self.hosts.append(Host(i, ns, hostname, address))

    # -- running inside a host -------------------------------------------------------------
    def argv(self, host: Host, argv: list, private_shm: bool = False) -> list:
        """`argv` run inside `host`: its network namespace and a UTS namespace named after it.
        With private_shm, also a /dev/shm of its own, as a real host has (a tmpfs in the mount
        namespace `ip netns exec` makes; it goes when the command's last process ends): DistDGL's
        servers name their shared memory after the graph, so two hosts sharing one would collide."""
        shm = "mount -t tmpfs -o mode=1777 gnshm /dev/shm && " if private_shm else ""
        return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "sh", "-c",
                f'{shm}hostname {host.hostname} && exec "$@"', "sh", *map(str, argv)]

    def popen(self, host: Host, argv: list, private_shm: bool = False, **kw) -> subprocess.Popen:
        """Start `argv` inside `host` in a process group of its own, tracked for teardown."""
        proc = subprocess.Popen(self.argv(host, argv, private_shm), start_new_session=True, **kw)
        self.groups.append(proc.pid)
        self.started.append(proc.pid)
        return proc

    def run(self, host: Host, argv: list, timeout=30, **kw) -> subprocess.CompletedProcess:
        proc = self.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
        out, _ = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")

    def pids(self, host: Host) -> list:
        """Every process whose network namespace is the host's (`ip netns pids`)."""
        res = _ip("netns", "pids", host.netns, check=False)
        return [int(p) for p in res.stdout.split()] if res.returncode == 0 else []

    def kill_host(self, host: Host, sig=signal.SIGKILL) -> list:
        """Send `sig` to every process of the host, by PID: a node dying at once. The PIDs hit."""
        hit = self.pids(host)
        for pid in hit:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return hit

    def kill_all(self, host: Host, rounds=20) -> list:
        """SIGKILL every process of the host until none is left (a process may fork while the
        first round runs): at most `rounds` rounds, 0.1 s apart. The PIDs hit."""
        killed = []
        for _ in range(rounds):
            hit = self.kill_host(host)
            killed += hit
            if not hit:
                break
            time.sleep(0.1)
        return killed

    def set_link(self, host: Host, up: bool) -> None:
        """Set the host's link down (a pulled cable: its processes stay alive, nothing answers
        across it) or up again. Only this host's end: the others keep theirs."""
        _ip("-n", host.netns, "link", "set", IFNAME, "up" if up else "down")

    # -- removing ----------------------------------------------------------------------------
    def stop(self) -> None:
        """Kill every process (groups started here, then anything left in a namespace), then
        delete the namespaces (their veth links and the bridge go with them) and /etc/netns/*."""
        for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
            for pgid in self.groups:
                try:
                    os.killpg(pgid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            for host in self.hosts:
                self.kill_host(host, sig)
            deadline = time.time() + wait_s
            while time.time() < deadline and any(self.pids(h) for h in self.hosts):
                time.sleep(0.1)
        for pgid in self.groups:  # reap our direct children
            try:
                os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                pass
        self.groups = []
        for ns in reversed(self.made):
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
        self.made = []
        try:
            ETC_NETNS.rmdir()  # only when empty: another session's hosts keep theirs
        except OSError:
            pass

    def leftovers(self) -> list:
        """What of this fixture still exists: namespaces, /etc/netns entries, links in root's
        namespace, processes in its namespaces. Empty after stop()."""
        found = [f"namespace {n}" for n in _ip("netns", "list", check=False).stdout.split()
                 if n.startswith(self.prefix + "-")]
        found += [f"/etc/netns/{p.name}" for p in ETC_NETNS.glob(f"{self.prefix}-*")] if ETC_NETNS.exists() else []
        found += [f"link {line.split(':')[1].strip()}" for line in _ip("-o", "link", check=False).stdout.splitlines()
                  if self.prefix in line or IFNAME in line]
        for host in self.hosts:
            found += [f"process {p} in {host.netns}" for p in self.pids(host)]
        found += [f"process {pid} of group {pgid}" for pid, pgid, _ in _processes() if pgid in self.started]
        # A process can keep a namespace alive after `ip netns del` removed its name; it still
        # shows the namespace's inode, whatever started it (a daemon that forked away, a rank).
        found += [f"process {pid} in namespace inode {ino}" for pid, _, ino in _processes() if ino in self.inodes]
        return found


def _processes() -> list:
    """(pid, process-group id, network-namespace inode) of every live (not zombie) process."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            ino = os.stat(stat.parent / "ns" / "net").st_ino
        except OSError:
            continue
        if fields[0] != "Z":
            found.append((int(stat.parent.name), int(fields[2]), ino))
    return found
