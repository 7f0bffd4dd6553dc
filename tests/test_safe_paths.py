"""``safe_paths``: no level below the named folder is followed through a link, parts cannot
climb out, reads take plain files only (a FIFO would block) and refuse oversized ones."""

import os

import pytest

from ivln_ce.safe_paths import UnsafePath, check_regular, inside, make_dirs, open_regular, read_regular


def test_inside_joins_plain_parts_and_refuses_links_and_climbing(tmp_path):
    assert inside(tmp_path, "a", "b/c") == tmp_path / "a" / "b" / "c"  # nothing need exist yet
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    for parts in (("link",), ("link", "x"), ("ok", "..", "x"), ("",), ("a/./b",), ("a\\b",)):
        with pytest.raises(UnsafePath):
            inside(tmp_path, *parts)


def test_the_named_folder_itself_may_be_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "named")
    assert make_dirs(tmp_path / "named", "x/y") == tmp_path / "named" / "x" / "y"
    assert (tmp_path / "real" / "x" / "y").is_dir()


def test_make_dirs_never_creates_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(outside, root / "cache")
    with pytest.raises(UnsafePath, match="symbolic link"):
        make_dirs(root, "cache", "xx")
    assert list(outside.iterdir()) == []
    (root / "file").write_text("x")
    with pytest.raises(UnsafePath, match="not a folder"):
        make_dirs(root, "file")


def test_reads_take_plain_files_within_their_bound(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"abcdef")
    assert read_regular(f, 6) == b"abcdef" and check_regular(f).st_size == 6
    with open_regular(f) as fh:
        assert fh.read() == b"abcdef"
    with pytest.raises(UnsafePath, match="more than"):
        read_regular(f, 5)
    os.symlink(f, tmp_path / "link")
    with pytest.raises(UnsafePath, match="symbolic link"):
        read_regular(tmp_path / "link", 100)
    os.mkfifo(tmp_path / "fifo")  # opening it for reading would block until a writer came
    with pytest.raises(UnsafePath, match="FIFO"):
        read_regular(tmp_path / "fifo", 100)
    with pytest.raises(UnsafePath, match="folder"):
        check_regular(tmp_path)
    with pytest.raises(FileNotFoundError):
        check_regular(tmp_path / "missing")
