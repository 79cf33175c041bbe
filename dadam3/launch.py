"""``python -m dadam3.launch``: torchrun, with a clean stop that looks like one.

Takes torchrun's arguments unchanged and runs the same elastic agent, for example::

    python -m dadam3.launch --standalone --nproc-per-node=2 -m dadam3.train placement=distributed ...

torchrun reports every non-zero rank exit, and a signal to itself, as a failure: exit status
1 and a multi-line dump. Here the ranks' own outcome is the result: when they stopped on
their own terms (a stop signal: 130/143 after a checkpoint; a refusal: 2; divergence: 3; a
failed write or a lost peer: 1), each has said so in one line and this launcher exits with
the first failing rank's status, printing nothing more. A rank killed by a signal (SIGKILL,
a crash) is one line here. A SIGINT/SIGTERM to the launcher is forwarded to the ranks by the
agent (they checkpoint and stop; it waits up to ``--shutdown-timeout`` seconds, default 30)
and the launcher exits with 128 + signal.

A signal may land anywhere in the agent's own code, where torch's handler raises: inside its
metrics wrapper the exception becomes an ``UnboundLocalError``, and the agent's clean-up then
stops the ranks with SIGTERM whatever the signal was. So the launcher notes every signal it is
sent (its own handler until the agent installs torch's, then torch's handler wrapped), the
agent's shutdown forwards the signal that arrived (SIGINT stays SIGINT), a further signal while
the ranks checkpoint is noted but lets them finish, and whatever the agent raised after a
signal ends as that signal's exit status (130 SIGINT, 143 SIGTERM, 129 SIGHUP, 131 SIGQUIT).
A ``--master-port`` in use is one line (exit 2); any other environmental failure goes through
the entry points' boundary (:func:`dadam3.errors.boundary.exit_on_failure`).
"""
from __future__ import annotations

import functools
import logging
import re
import signal
import sys

from dadam3.errors.boundary import exit_on_failure

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)   # torch's agent handles these


class _Signalled(BaseException):
    """A stop signal before the agent installed its handlers (torch still loading, rendezvous)."""


_received: list[int] = []       # the stop signals this process was sent, in order
_closing = [False]              # the agent is stopping the ranks: a further signal lets them finish


def _note_early(signum, frame) -> None:
    _received.append(signum)
    raise _Signalled()


def _noting(handler):
    """torch's handler (it raises SignalException wherever the agent is), noting the signal first;
    while the agent stops the ranks a further signal is only noted."""
    @functools.wraps(handler)
    def note(signum, frame):
        _received.append(signum)
        if not _closing[0]:
            handler(signum, frame)
    return note


def _forwarding(shutdown):
    """The agent's shutdown sending the ranks the signal that arrived (its clean-up after an
    exception sends SIGTERM)."""
    @functools.wraps(shutdown)
    def close(self, death_sig=signal.SIGTERM, timeout=30):
        _closing[0] = True
        return shutdown(self, signal.Signals(_received[0]) if _received else death_sig, timeout)
    return close


ENTRY_CONFIGS = {"dadam3.train": "train", "dadam3.synthetic": "synthetic"}    # module -> its config


@exit_on_failure
def main(argv: list[str] | None = None) -> int:
    for sig in STOP_SIGNALS:
        signal.signal(sig, _note_early)
    try:
        return _launch(argv)
    except BaseException:
        if _received:                   # whatever the agent raised after it: the signal's own status
            return 128 + _received[0]
        raise


def _launch(argv: list[str] | None) -> int:
    import torch.distributed.elastic.multiprocessing.api as mp_api
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    handler = getattr(mp_api, "_terminate_process_handler", None)      # torch's (absent: nothing to wrap)
    if handler is not None and not hasattr(handler, "__wrapped__"):
        mp_api._terminate_process_handler = _noting(handler)
        LocalElasticAgent._shutdown = _forwarding(LocalElasticAgent._shutdown)

    for name in list(logging.root.manager.loggerDict):  # the agent's per-event warnings: not for users
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)

    args = parse_args(sys.argv[1:] if argv is None else argv)
    if getattr(args, "module", False) and args.training_script in ENTRY_CONFIGS:     # refused once here, not per rank
        from dadam3.run.command_line import check_command_line
        check_command_line(ENTRY_CONFIGS[args.training_script], args.training_script_args)
    try:
        run(args)       # torchrun's own main, without @record
    except ChildFailedError as e:
        said = sorted((r, f.exitcode) for r, f in e.failures.items() if f.exitcode > 0)
        if said:                                        # a rank said why, in its own line
            return said[0][1]
        rank, failure = e.get_first_failure()
        name = signal.Signals(-failure.exitcode).name if -failure.exitcode in signal.valid_signals() else "a signal"
        print(f"error: rank {rank} (pid {failure.pid}) was killed by {name}; the other ranks were stopped (the run's "
              "log ends with the last record rank 0 wrote)", file=sys.stderr)
        return 128 - failure.exitcode
    except SignalException as e:
        return 128 + int(_received[0] if _received else e.sigval)
    except RuntimeError as e:              # the agent's store: DistNetworkError (a RuntimeError)
        if "EADDRINUSE" not in str(e) and "address already in use" not in str(e).lower():
            raise
        port = re.search(r"port: (\d+)", str(e))
        print(f"error: --master-port={port.group(1) if port else '?'}: the launcher cannot listen on it: it is in "
              "use by another program; choose a free port (--master-port=P) or use --standalone", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
