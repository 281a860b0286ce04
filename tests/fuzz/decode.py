"""The full decode of a savepoint as a fuzz case sees it, and the digest that tells outputs apart.

StateMeta first, then every state of every operator through ``SavepointReader`` to an Arrow table
that must validate fully and convert to Python values. A statecat error in one state is recorded
and the other states are still read.
"""

from __future__ import annotations

import hashlib

from statecat.readers import SavepointReader
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.model import load_state_meta


def decode_savepoint(path: str) -> dict[str, str]:
    """State (``operator id/state name#index``) -> ``rows:N:DIGEST`` or ``error:TYPE``.

    Messages stay out: they name the scratch copy, which differs between runs.

    Raises a StatecatError when StateMeta cannot be built; every other exception propagates."""
    meta = load_state_meta(path, use_state_info=False)
    reader = SavepointReader(meta)
    results = {}
    for index, (operator, state) in enumerate(meta.states()):
        name = f"{operator.id}/{state.name}#{index}"
        try:
            table = reader.table(state.name, operator.id)
        except StatecatError as error:
            results[name] = f"error:{type(error).__name__}"
            continue
        table.validate(full=True)
        rows = table.to_pylist()
        digest = hashlib.sha256(f"{table.schema}\n{rows!r}".encode()).hexdigest()[:16]
        results[name] = f"rows:{len(rows)}:{digest}"
    return results
