"""``python -m verispec``: a Ctrl-C while the command line's modules load is the user's stop too (130, one line),
as it is once the command runs (``verispec.cli.entry_point``)."""

import sys

try:
    from verispec.cli import entry_point
except KeyboardInterrupt:
    sys.stderr.write("verispec: interrupted\n")
    sys.exit(130)

entry_point()
