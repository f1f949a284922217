"""Start one node's ranks without torchrun's agent: a parent that imports torch, starts N rank
processes with the environment torchrun gives them, waits for them, and stops the others when
one fails, as torchrun does.

    python -m runners.launch.spawn --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 \
        --store RUN_DIR/.pg-store -m runners.rank.harness --config CONFIG

Why not torchrun: on one node its agent only hands out ranks and an address, and it notices the
ranks' exit only at its monitor interval. Multi-node runs keep torchrun: there its rendezvous is
the point. Why the torch import, though this process never uses torch: ranks started by a
parent that had not imported it trained 1-8 % slower than torchrun's, in every epoch, in seven
settled A/Bs on a 2-core machine; with the import they were as fast (0.999x and 1.001x). Nothing
the ranks inherit differs (environment, signal masks, limits, timer slack); why it matters is
not known (benchmarks/README.md). It costs the import's time before the ranks start: a run's
whole command took about 1.2 s longer on 2 cores.
The fair harness's ranks meet through a file store (GNNSCALE_INIT_METHOD=file://STORE; the
launcher puts it in the run directory and this process removes it): with a TCP store served
by rank 0, a rank that reaches it before rank 0 listens waits for the client's retry, 0.75 s
of a DGL launch measured here. Other rank code (Lightning's, in the study harness) creates its own TCP store from MASTER_ADDR and
MASTER_PORT, as under torchrun with TORCHELASTIC_USE_AGENT_STORE=False; Lightning recognises
the environment as torchelastic's (RANK, GROUP_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE), so it
starts no processes.

A failure ends with torchrun's summary lines (`rank : R (local_rank: L)` and
`exitcode : C (pid: P)`, C negative for a signal), which runners.watch.evidence reads, and exit
code 1; SIGTERM or SIGINT to this process is passed to the ranks, which get KILL_GRACE_S to
leave before SIGKILL.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import subprocess
import sys
import time

KILL_GRACE_S = 30.0  # torchrun's own grace between SIGTERM and SIGKILL when it stops its workers
WAIT_STEP_S = 0.05  # the poll while the ranks are being stopped
# While the ranks run this process sleeps until a signal comes (a rank's SIGCHLD, a stop signal);
# this bounds one sleep should a wakeup ever be lost.
SLEEP_BOUND_S = 5.0


@contextlib.contextmanager
def signal_sleep():
    """A sleep() that returns once a signal has come to this process (SIGCHLD when a rank exits,
    SIGTERM or SIGINT), at the latest after SLEEP_BOUND_S: the signals' bytes come through
    signal.set_wakeup_fd. It replaced a poll 20 times a second: on a small machine every wakeup
    takes a core from a rank for a moment, and a DDP step waits for its slowest rank (what that
    cost is not settled: benchmarks/README.md)."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    old_fd = signal.set_wakeup_fd(write_fd)
    old_chld = signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # by default SIGCHLD wakes nobody

    def sleep() -> None:
        if select.select([read_fd], [], [], SLEEP_BOUND_S)[0]:
            os.read(read_fd, 4096)

    try:
        yield sleep
    finally:
        signal.signal(signal.SIGCHLD, old_chld)
        signal.set_wakeup_fd(old_fd)
        os.close(read_fd)
        os.close(write_fd)


def rank_environment(base: dict, local_rank: int, nproc: int, master_addr: str, master_port: int,
                     store: str) -> dict:
    """The variables torchrun sets for a worker of a one-node job (node rank 0, no restarts),
    and the file store the fair harness meets through."""
    env = dict(base)
    env["GNNSCALE_INIT_METHOD"] = f"file://{store}"
    env.update({
        "RANK": str(local_rank), "LOCAL_RANK": str(local_rank), "GROUP_RANK": "0", "ROLE_RANK": str(local_rank),
        "ROLE_NAME": "default", "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(nproc), "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": f"gnnscale-{os.getpid()}", "TORCHELASTIC_USE_AGENT_STORE": "False",
    })
    return env


def signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name if code < 0 else f"exit code {code}"
    except ValueError:
        return f"signal {-code}"


class Ranks:
    """The node's rank processes: started together, watched together, stopped together."""

    def __init__(self, command: list, nproc: int, master_addr: str, master_port: int, store: str):
        self.procs = [subprocess.Popen(command, env=rank_environment(os.environ, r, nproc, master_addr, master_port,
                                                                     store))
                      for r in range(nproc)]
        self.stop_signal: int | None = None

    def wait(self) -> list:
        """Wait until every rank has exited, or until one fails (then stop the others);
        returns the failures [(rank, pid, code)] in the order they were seen."""
        failures = []

        def note_failures() -> None:
            failures.extend([(rank, p.pid, p.returncode) for rank, p in enumerate(self.procs)
                             if p.returncode not in (None, 0) and all(f[0] != rank for f in failures)])

        with signal_sleep() as sleep:  # installed before the first check: no exit goes unnoticed
            while any([p.poll() is None for p in self.procs]):  # a list: every rank polled, not up to the first alive
                note_failures()
                if failures or self.stop_signal is not None:
                    break
                sleep()
        note_failures()
        self.stop()
        return failures

    def stop(self) -> None:
        """SIGTERM to the ranks still running, SIGKILL to those left after KILL_GRACE_S."""
        alive = [p for p in self.procs if p.poll() is None]
        for p in alive:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
            time.sleep(WAIT_STEP_S)
        for p in alive:
            if p.poll() is None:
                p.kill()
                p.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m runners.launch.spawn", description=__doc__.split("\n")[0])
    p.add_argument("--nproc-per-node", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--store", required=True, help="a path for the file store the ranks meet through (must not exist)")
    p.add_argument("-m", dest="module", required=True, help="the module every rank runs")
    args, rest = p.parse_known_args(argv)
    if args.nproc_per_node < 1:
        p.error(f"--nproc-per-node {args.nproc_per_node}: must be at least 1")
    if os.path.exists(args.store):
        p.error(f"--store {args.store}: exists already; a file store must start empty")
    try:
        return run(args, rest, args.store)
    finally:
        try:
            os.remove(args.store)  # the ranks leave with os._exit, so nobody else removes it
        except FileNotFoundError:
            pass


def run(args, rest: list, store: str) -> int:
    import torch  # noqa: F401  (unused: see the module's docstring for why it is imported)

    ranks = Ranks([sys.executable, "-m", args.module, *rest], args.nproc_per_node, args.master_addr,
                  args.master_port, store)

    def on_signal(signum, frame):
        ranks.stop_signal = signum

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    failures = ranks.wait()
    if ranks.stop_signal is not None:
        print(f"runners.launch.spawn: stopped the ranks on {signal.Signals(ranks.stop_signal).name}", file=sys.stderr,
              flush=True)
        return 128 + ranks.stop_signal
    if not failures:
        return 0
    lines = ["runners.launch.spawn: a rank failed; the other ranks were stopped", "Failures (the first is the root cause):"]
    for rank, pid, code in failures:
        lines.append(f"  rank : {rank} (local_rank: {rank})  exitcode : {code} (pid: {pid})  {signal_name(code)}")
    print("\n".join(lines), file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
