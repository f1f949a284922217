"""The rulebook that turns a run's evidence into its status, cause and summary line.

Given what runners.watch.evidence gathered (heartbeats, process states, stacks, error records,
torchrun's exit codes, the ledger of process deaths, /dev/shm, disk and memory facts), it
decides why a run hung, timed out, crashed, was killed, ran out of memory or was interrupted:
which known cause applies (causes.CAUSES, with its label, text, remedy and status), which rank
is to blame, the evidence for it and the one-line summary. The decisions (`decide_stop`,
`decide_exit`, `blame`, `server_stall`) are pure functions of the evidence, tested with
constructed evidence; the findings that outrank them come after: overrides.OVERRIDES declares them
in order, overrides.apply_overrides runs them as one loop over the Findings an Outcome carries.

Modules: causes (Cause, CAUSES, Diagnosis, Outcome), ranks (where the ranks got, who they wait
for), stop (a hang or a time limit), exits (a run that ended by itself, was skipped or was
interrupted), servers (the partitioned strategy's graph servers), overrides (what supersedes).
"""

from runners.watch.diagnosis.causes import (CAUSES, RUN_CAUSES, SKIP_CAUSES, Cause, Diagnosis, Findings, Outcome,
                                            label_of)
from runners.watch.diagnosis.exits import (PEER_LOST, cause_errors, classify_exit, decide_exit, diagnose_divergence,
                                           diagnose_exit, diagnose_interruption, shm_exhaustion, skipped, worker_deaths)
from runners.watch.diagnosis.overrides import (OVERRIDES, Override, Verdict, adopted, apply_overrides,
                                               crash_before_hang, diagnose_vanished, out_of_memory, preview, register,
                                               vanished_line)
from runners.watch.diagnosis.ranks import (FROZEN_STATES, blame, group_ranks, is_frozen, progress_key, progress_line,
                                           rank_ranges)
from runners.watch.diagnosis.servers import (diagnose_stalled_server, lost_server, remote_server, remote_server_stall,
                                             server_stall)
from runners.watch.diagnosis.stop import (cause_label, decide_stop, diagnose_stop, fd_exhaustion, fd_remedy, remedy_for,
                                          stop_summary)

__all__ = ["CAUSES", "RUN_CAUSES", "SKIP_CAUSES", "Cause", "Diagnosis", "Findings", "Outcome", "label_of",
           "PEER_LOST", "cause_errors",
           "classify_exit", "decide_exit", "diagnose_divergence", "diagnose_exit", "diagnose_interruption",
           "shm_exhaustion", "skipped", "worker_deaths", "OVERRIDES", "Override", "Verdict", "adopted",
           "apply_overrides", "crash_before_hang", "diagnose_vanished", "out_of_memory", "preview", "register",
           "vanished_line", "FROZEN_STATES", "blame", "group_ranks", "is_frozen", "progress_key", "progress_line",
           "rank_ranges", "diagnose_stalled_server", "lost_server", "remote_server", "remote_server_stall",
           "server_stall", "cause_label", "decide_stop", "diagnose_stop", "fd_exhaustion", "fd_remedy", "remedy_for",
           "stop_summary"]
