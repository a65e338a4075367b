"""The command line: every command, bad input on one line, files written, and the README's commands run verbatim
(verispec.cli)."""
