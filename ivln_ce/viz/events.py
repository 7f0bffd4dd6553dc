"""TensorBoard event files of a training folder, found and checked before they are read.

``viz curves`` reads folders that may come from someone else. A link below the folder could
pull any file of the machine into the figure, a FIFO would never end a read, and random bytes,
a gzip or a text file named ``events.out.tfevents.*`` would otherwise be read as a run with no
data (TensorBoard's reader skips what it cannot parse). So:

- ``event_files`` walks the folder without following links (the folder the user named may itself
  be a link): an event file that is a link, a FIFO or a device is refused, a linked folder is not
  entered, and the walk is bounded in depth and entries;
- ``check_event_file`` opens a plain file of bounded size (``safe_paths.open_regular``) and checks
  its TFRecord framing: every record's length with its masked CRC-32C, the first record (the
  ``file_version`` event every writer starts with) with its data CRC; a cut last record (a killed
  run) is accepted, as TensorBoard reads the records before it.

Every refusal is a ``ResultsError`` naming the file or the folder.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from ivln_ce.safe_paths import UnsafePath, open_regular
from ivln_ce.viz.files import ResultsError

PATTERN_PREFIX = "events.out.tfevents."
#: the largest event file read (a long run's scalars are tens of MB)
MAX_EVENT_FILE_BYTES = 256 * 2**20
#: the first record, the writer's file_version event, is tens of bytes
MAX_FIRST_RECORD = 1 << 16
#: how deep below a training folder event files are looked for, and how many entries are seen
MAX_WALK_DEPTH = 16
MAX_WALK_ENTRIES = 200_000
#: event files one training folder may hold
MAX_EVENT_FILES = 1_000


def event_files(train_dir: str | Path) -> list[Path]:
    """The event files of a training folder (or the one file named), sorted by path; links
    below the folder are never followed."""
    root = Path(train_dir)
    try:
        st = root.stat()  # the folder (or file) the user named may be a link: their choice
    except FileNotFoundError:
        raise ResultsError(f"{root}: no such training folder") from None
    except OSError as exc:
        raise ResultsError(f"{root}: cannot be read ({exc.strerror})") from None
    if stat.S_ISREG(st.st_mode):
        return [root.resolve()]
    if not stat.S_ISDIR(st.st_mode):
        raise ResultsError(f"{root}: not a training folder or an event file (a FIFO, socket or device)")
    files: list[Path] = []
    seen = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            raise ResultsError(f"{folder}: cannot be listed ({exc.strerror})") from None
        seen += len(entries)
        if seen > MAX_WALK_ENTRIES:
            raise ResultsError(f"{root}: more than {MAX_WALK_ENTRIES:,} entries below it; give the training folder itself")
        for entry in entries:
            path = Path(entry.path)
            if entry.name.startswith(PATTERN_PREFIX):
                if entry.is_symlink():
                    raise ResultsError(f"{path}: is a symbolic link; event files are not read through links inside {root} "
                                       "(copy the file in)")
                if not entry.is_file(follow_symlinks=False):
                    raise ResultsError(f"{path}: not a regular file")
                files.append(path)
            elif entry.is_dir(follow_symlinks=False):  # a linked folder is not entered
                if depth + 1 > MAX_WALK_DEPTH:
                    raise ResultsError(f"{path}: more than {MAX_WALK_DEPTH} folders below {root}; give the training folder itself")
                stack.append((path, depth + 1))
    if not files:
        raise ResultsError(f"{root}: no TensorBoard event files (events.out.tfevents.*) in this folder or below")
    if len(files) > MAX_EVENT_FILES:
        raise ResultsError(f"{root}: {len(files):,} event files, more than the {MAX_EVENT_FILES:,} one training folder may hold")
    return sorted(files)


def check_event_file(path: Path) -> None:
    """Refuse ``path`` unless it is a plain file (no link, at most ``MAX_EVENT_FILE_BYTES``)
    framed as TFRecords whose first record is the ``file_version`` event of a TensorBoard
    writer; every complete record's length must carry its CRC."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    def bad(why: str) -> ResultsError:
        return ResultsError(f"{path}: not a TensorBoard event file ({why})")

    try:
        fh = open_regular(path, MAX_EVENT_FILE_BYTES)
    except UnsafePath as exc:
        raise ResultsError(str(exc)) from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        offset = 0
        while offset < size:
            header = fh.read(12)
            if len(header) < 12:
                if offset == 0:
                    raise bad("shorter than one record")
                return  # a cut last record: what precedes it is read
            length, crc = struct.unpack("<QI", header)
            if masked_crc32c(header[:8]) != crc:
                raise bad(f"record at byte {offset}: its length field fails its checksum")
            end = offset + 12 + length + 4
            if offset == 0:
                if length > MAX_FIRST_RECORD or end > size:
                    raise bad("the first record is not a writer's file_version event")
                data, data_crc = fh.read(length), fh.read(4)
                if masked_crc32c(data) != struct.unpack("<I", data_crc)[0]:
                    raise bad("the first record fails its checksum")
                event = Event()
                try:
                    event.ParseFromString(data)
                except DecodeError:
                    raise bad("the first record is not an Event") from None
                if not event.file_version.startswith("brain.Event:"):
                    raise bad("the first record is not a writer's file_version event")
            elif end > size:
                return  # a cut last record
            else:
                fh.seek(end)
            offset = end
