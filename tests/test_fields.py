"""``fields``: the in-place key edits every rule uses keep the order of the keys they do not touch."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from numi_mw.core.fields import rename, splice

_KEYS = st.sampled_from(["role", "content", "reasoning", "reasoning_content", "reasoning_details", "tool_calls"])


def test_rename_puts_the_new_key_where_the_old_one_stood() -> None:
    message = {"role": "assistant", "reasoning": None, "reasoning_content": "r", "tool_calls": [], "content": "a"}
    rename(message, "reasoning_content", "reasoning", "r")
    assert list(message.items()) == [("role", "assistant"), ("reasoning", "r"), ("tool_calls", []), ("content", "a")]


@given(keys=st.lists(_KEYS, min_size=1, unique=True), data=st.data())
def test_rename_is_splice_of_one_key(keys: list[str], data: st.DataObject) -> None:
    old = data.draw(st.sampled_from(keys))
    new = data.draw(_KEYS.filter(lambda key: key != old))
    renamed = {key: i for i, key in enumerate(keys)}
    spliced = dict(renamed)
    rename(renamed, old, new, "value")
    splice(spliced, (old,), {new: "value"})
    assert list(renamed.items()) == list(spliced.items())
