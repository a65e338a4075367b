"""Issue 64: a legal 255-byte output name gets a lock (its lock file's name ``NAME.lock`` would be 260 bytes, past
NAME_MAX, and the run was refused with 'File name too long'). Negative control: the old name fails to open."""

from __future__ import annotations

import errno
import os

import pytest

from verispec.files import store_lock


@pytest.mark.parametrize("name", ["a" * 250 + ".json", "é" * 127 + "a", "b" * 251])
def test_a_255_byte_output_name_gets_a_lock_of_its_own(tmp_path, name):
    store = tmp_path / name
    assert len(os.fsencode(store.name)) <= 255
    lock = store_lock.lock_path(store)
    assert len(os.fsencode(lock.name)) <= 255 and lock.parent == store.parent
    assert lock != store_lock.lock_path(tmp_path / (name[:-1] + "z"))  # another output, another lock
    with store_lock.store_lock(store):
        assert lock.exists()
    with pytest.raises(OSError) as refused:  # the old name
        os.open(store.with_name(store.name + ".lock"), os.O_RDWR | os.O_CREAT)
    assert refused.value.errno == errno.ENAMETOOLONG


def test_a_short_name_keeps_its_plain_lock(tmp_path):
    assert store_lock.lock_path(tmp_path / "rows.json").name == "rows.json.lock"
