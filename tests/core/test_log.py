"""Log entries: the commit's spliced encoding (the main file's JSON reused as the entry's
``metadata``) decodes to exactly the entry, whatever the metadata and info hold."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from kstore.blocks.commit import _entry_bytes
from kstore.core import serialize
from kstore.core.log import LogEntry

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["metadata", "a", "\"metadata\":null", "x"]), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(metadata=st.dictionaries(st.text(max_size=10), _json_values, max_size=4),
       info=st.dictionaries(st.sampled_from(["metadata", "note", "k"]), _json_values, max_size=3))
def test_spliced_entry_bytes_decode_to_the_entry(metadata, info):
    e = LogEntry(version=1, commit_id="c", operation="append", parent=0,
                 timestamp=datetime(2024, 1, 1, tzinfo=timezone.utc), metadata=metadata, info=info)
    spliced = _entry_bytes(e, serialize.dumps(metadata, "json"))
    assert json.loads(spliced) == json.loads(serialize.dumps(e.to_dict(), "json"))
    assert LogEntry.from_dict(json.loads(spliced), dataset_uuid="d", version=1) == e
