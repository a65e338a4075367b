"""Files verispec reads and writes: bounded reads of users' files (``reading``), atomic writes that readers see
whole or not at all (``io``), one writer per output (``store_lock``), the run record every result file states
(``provenance``), and the markers that tell verispec's own files from a user's (``markers``)."""
