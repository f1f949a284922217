"""The SLURM allocation a job step runs in, seen from one of its tasks: the job's nodes in node
order, each with the address SLURM itself reaches it on (scontrol's NodeAddr), as
scripts/slurm_node.sh resolves the master's. A node's name is no substitute: on the node
itself it can resolve to loopback (127.0.1.1 in Debian's /etc/hosts), and each node would
then write a different list.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import subprocess

from runners.settings import ConfigError

SCONTROL_TIMEOUT_S = 15.0
NODE_ADDR = re.compile(r"\bNodeAddr=(\S+)")


def _scontrol(*args: str) -> str:
    try:
        res = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S)
    except FileNotFoundError:
        raise ConfigError("scontrol is not on PATH: the SLURM allocation's nodes cannot be read") from None
    except subprocess.TimeoutExpired:
        raise ConfigError(f"scontrol {' '.join(args)}: no answer within {SCONTROL_TIMEOUT_S:.0f} s") from None
    if res.returncode != 0:
        raise ConfigError(f"scontrol {' '.join(args)} failed (exit {res.returncode}): "
                          f"{(res.stderr or res.stdout).strip()[-300:]}")
    return res.stdout


def address_of(name: str, node_addr: str) -> str:
    """The IPv4 address of node `name` whose NodeAddr is `node_addr` (an address, or a name SLURM
    resolves). A name that resolves to loopback here is refused: it is this host's own entry in
    /etc/hosts, not the address the other nodes reach it on."""
    try:
        ip = ipaddress.ip_address(node_addr)
    except ValueError:
        try:
            ip = ipaddress.ip_address(socket.getaddrinfo(node_addr, None, socket.AF_INET)[0][4][0])
        except (OSError, IndexError) as exc:
            raise ConfigError(f"SLURM node {name}: NodeAddr {node_addr!r} does not resolve to an IPv4 address "
                              f"here ({exc}); set NodeAddr in slurm.conf to the node's address") from None
    if ip.version != 4:
        raise ConfigError(f"SLURM node {name}: NodeAddr {node_addr} is not an IPv4 address (DGL's ip_config "
                          "takes IPv4 addresses)")
    if ip.is_loopback:
        said = "is" if str(ip) == node_addr else f"resolves to {ip} on this host ({os.uname().nodename}),"
        raise ConfigError(f"SLURM node {name}: NodeAddr {node_addr} {said} a loopback address: the other nodes "
                          "cannot reach it there; set NodeAddr in slurm.conf to the node's address on the network "
                          "the nodes share")
    return str(ip)


def allocation(environ=None) -> list:
    """[{name, node_addr, address}] of the job's nodes in node order (SLURM_JOB_NODELIST,
    expanded by scontrol): the order SLURM numbers a one-task-per-node step's tasks in, so task k
    runs on node k. `node_addr` as slurm.conf gives it (scontrol shows the name where none is
    set), `address` its IPv4 address. Raises ConfigError naming what is missing or unusable."""
    environ = os.environ if environ is None else environ
    nodelist = environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise ConfigError("not inside a SLURM job step (SLURM_JOB_NODELIST is unset): start the run with srun "
                          "(scripts/slurm_node.sh), or give --ip-config FILE")
    names = _scontrol("show", "hostnames", nodelist).split()
    found = []
    for name in names:
        m = NODE_ADDR.search(_scontrol("show", "node", "-o", name))
        node_addr = m.group(1) if m else name
        found.append({"name": name, "node_addr": node_addr, "address": address_of(name, node_addr)})
    return found
