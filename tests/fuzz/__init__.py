"""Fuzzing statecat with damaged copies of the real fixture savepoints.

- ``mutations``: the seeded single mutations (bit flips, byte overwrites, truncation, huge
  lengths, insertions, deletions) and their one-line spelling, e.g. ``sql_window_2.3/_metadata@5741:set:ff``.
- ``decode``: the full decode of a savepoint (StateMeta, then every state of every operator to
  validated Arrow and Python values) and its digest.
- ``worker``: the child process that decodes many cases in a loop and reports each over a pipe.
- ``runner``: the pool of workers (restarted after a crash, hang or memory blow-up) and the
  classification of outcomes.
- ``replay``: ``python -m tests.fuzz.replay SPEC`` re-runs one case.
- ``targets``: byte-input entry points (``_metadata``, stream headers, serializer snapshots, the
  per-record and column-wise decoders) and their seeds, for ``bench/fuzz_atheris.py``.

Allowed outcomes are a statecat error, unchanged output, or changed values; a crash, a hang, a
memory blow-up or any other exception is a finding. ``bench/fuzz_mutations.py`` runs long
campaigns of the same cases.
"""
