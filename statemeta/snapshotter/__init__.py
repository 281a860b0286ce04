"""statecat.statemeta.snapshotter: StateMeta written down, and snapshots watched.

* ``stateinfo``: StateMeta as the versioned ``stateInfo`` JSON document (STATEINFO.md here);
* ``watcher``: ``statecat watch``, which snapshots each new savepoint or checkpoint as it lands;
* ``completeness``: whether a snapshot directory is whole (``_metadata`` and every file it names);
* ``taken_at``: when a snapshot was taken.

May import: everything else in statemeta. The model reads a fresh stateInfo when one matches
``_metadata`` (``model.load_state_meta``): the one call into this room from below, made lazily.
"""
