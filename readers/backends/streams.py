"""What the readers of every backend's streams share: snapshot compression."""

from __future__ import annotations

from statecat.statemeta.errors import FormatError
from statecat.statemeta.files.headers import SNAPPY_STREAM_IDENTIFIER


def decompress_snappy_framed(data: bytes, file: str, offset: int) -> bytes:
    """One snappy-framed block (a key-group or an operator state element) of ``file`` at ``offset``.

    The framing caps each chunk at 64 KiB uncompressed, so the output stays within a fixed
    multiple of the input."""
    import cramjam

    if not data.startswith(SNAPPY_STREAM_IDENTIFIER):
        data = SNAPPY_STREAM_IDENTIFIER + data
    try:
        return bytes(cramjam.snappy.decompress(data))
    except cramjam.DecompressionError as exc:
        raise FormatError(
            f"expected snappy-framed compressed state data, got bytes that do not decompress ({exc})",
            file=file,
            offset=offset,
            hint="The state file is damaged",
        ) from None
