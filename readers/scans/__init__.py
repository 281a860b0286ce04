"""statecat.readers.scans: a state's rows as Arrow record batches, and the views built on them.

* ``scan``: the scanners of keyed state (a key-group at a time, bounded memory) and of operator
  and broadcast state; ``fastscan``: the compiled column-wise walk of keyed state;
* ``keyview``: every state of one key; ``diff``: two savepoints compared; ``skew``: state size by
  key-group and subtask; ``state_bytes``: bytes per state.

May import: statemeta, ``readers.codecs``, ``readers.backends`` and ``readers.keygroups``; the front
door (``statecat.readers``) only lazily.
"""
