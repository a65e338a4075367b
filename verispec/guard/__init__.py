"""The guard: how verispec runs code it does not trust and still ends with its own verdict, status and output.

Threat model. The code under check (a user's rule or function, an engine's file, a zoo entry) may do anything a
Python process can: raise, call ``sys.exit`` or ``os._exit``, loop or sleep for ever, allocate until the machine
runs out, spawn processes and threads that outlive it, print anything to stdout and stderr, write files, send
signals, change its own limits, and try to rewrite verispec's objects or the messages that carry its results. It runs
in a sandbox process of its own (``sandbox``, ``sandbox_process``), forked from verispec's worker, and talks to it
only through a channel of records with a fresh nonce each call (``wire``): what it sends out of turn is dropped, and
an answer that is not verispec's protocol is a finding against the code, never a verdict.

What it cannot reach, on a kernel that grants the layers (``confinement``, ``namespace``): verispec's worker and
supervisor (no signal to them, no ptrace, no ``prlimit`` on them: seccomp; the worker is not dumpable), any other
process outside its own (a process-id namespace of its own, with its own ``/proc``: it neither sees nor signals
them, and what it leaves running ends with the namespace), the files outside its private folder and the folders
named writable (Landlock), and capabilities it would need to undo these (dropped).
The supervisor (``supervisor``, ``watch``, ``processes``) runs the command's work in a worker process, reaps every
process the code left behind, removes the scratch folder, and sets the exit status; ``budget`` holds the time
budgets and per-call limits, ``memory`` the memory ceiling, ``limits`` the numeric limits the guard and the
commands enforce.
"""
