"""Files read through ``fluxinfra.inputs`` (every reader's first step): the bytes, or a
FluxinfraError naming the file, whatever the path names (a device, a directory, a pipe with no
writer, nothing, a name with a NUL byte) and whatever the bytes are."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fuzzlib import clean, fuzz
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.errors import FluxinfraError
from fluxinfra.inputs import parse_json, parse_yaml, read_bytes, read_text

SPECIAL = ["/dev/zero", "/dev/null", "/dev/urandom", "/", "/proc/self/mem", "", "a\x00b",
           "fifo", "missing", "big", "file"]


@fuzz(st.sampled_from(SPECIAL) | st.text(max_size=12), st.binary(max_size=200),
       st.integers(0, 300))
@example("/dev/zero", b"", 100)
@example("fifo", b"", 100)
@example("big", b"x", 10)
@example("a\x00b", b"", 100)
def test_read_anything(path, data, limit):
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "file").write_bytes(data)
        Path(folder, "big").write_bytes(data * 100)
        os.mkfifo(Path(folder, "fifo"))
        here = os.getcwd()
        os.chdir(folder)
        try:
            got = clean(read_bytes, path, "file", limit=limit)
            if not isinstance(got, FluxinfraError):
                assert len(got) <= limit
                text = clean(read_text, path, "file", limit=limit)
                if isinstance(text, str):
                    clean(parse_json, text, "file")
                    clean(parse_yaml, text, "file")
        finally:
            os.chdir(here)
