"""``python -m verispec``: a stop while the command line's modules load is the user's too (one line, 128 + the
signal's number: 130 for Ctrl-C), as it is once the command runs (``verispec.cli.entry_point``)."""

import signal
import sys


def _stopped_while_loading(signum, frame):
    sys.stderr.write(f"verispec: interrupted: stopped by {signal.Signals(signum).name} (a signal to verispec's own "
                     "process); no verdict\n")
    sys.exit(128 + signum)


for _number in (signal.SIGTERM, signal.SIGHUP):
    signal.signal(_number, _stopped_while_loading)

try:
    from verispec.cli import entry_point
except KeyboardInterrupt:
    sys.stderr.write("verispec: interrupted\n")
    sys.exit(130)

entry_point()
