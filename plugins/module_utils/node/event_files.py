# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A run's progress from what nearly every trainer writes anyway: TensorBoard event files (the
loss as a scalar at its step) and Lightning's CSV logger (metrics.csv).

An event file is a sequence of TFRecords: the data's length (uint64), the masked CRC-32C of the
length, the data, the masked CRC-32C of the data; each data an `Event` protocol buffer (wall_time
1, step 2, summary 5: Value{tag 1, simple_value 2, tensor 8}). This module reads them itself,
with nothing to install: the framing is checked by both CRCs, a record is parsed only when it is
small enough to be a scalar event (a larger one, an image or a histogram, is stepped over
unread), and a last record still being written (shorter than its length says) is left for the
next poll, not an error.

The watch reads incrementally: a poll starts where the last one stopped (a state of a few KB the
caller keeps) and reads at most POLL_MAX_BYTES; a file it meets for the first time, or one that
grew by more than that, is read from its last POLL_MAX_BYTES, where the first record boundary is
found by its CRCs. A poll's cost is flat in the file's size. The collect step reads each file
whole, once (records()).

What a job writes is untrusted: a record whose CRC does not match is counted as unreadable and
said, a value that is no number is no value, and a tag is text that the callers show through
untrusted.printable. It imports nothing outside Python's standard library."""

from __future__ import annotations

import array
import bisect
import csv
import io
import math
import os
import stat
import struct
import time

from .untrusted import whole

EVENT_FILE_PREFIX = "events.out.tfevents."
CSV_FILE = "metrics.csv"

# The loss's tag, in the order tried, each from a trainer's own code or docs
# (tests/unit/fixtures/trainers/event_tags.json says where): Lightning's usual self.log name (and
# its _step variant under on_step and on_epoch), the Hugging Face Trainer's and the reference
# trainer's, torchtitan's, Megatron-LM's, then common spellings.
LOSS_TAGS = ("train_loss", "train_loss_step", "train/loss", "loss_metrics/global_avg_loss", "lm loss",
             "loss/train", "training_loss", "loss")
# the other fields progress shows, each from its list of tags (the same sources); the learning
# rate also from a tag of Lightning's LearningRateMonitor (lr-<optimizer>) or torchtitan's
# (lr/<optimizer>). Megatron-LM's "throughput" is TFLOP/s, torchtitan's "throughput(tps)" per
# device: neither is the run's tokens/s.
FIELD_TAGS = dict(
    val_loss=("val_loss", "val/loss", "eval/loss", "validation_metrics/loss", "lm loss validation", "loss/val",
              "val_loss_epoch"),
    lr=("lr", "train/lr", "train/learning_rate", "learning-rate", "learning_rate"),
    tokens_per_s=("train/tokens_per_s", "tokens_per_s", "train/train_tokens_per_second"),
)
LR_PREFIXES = ("lr-", "lr/")
WANTED = frozenset(LOSS_TAGS).union(*FIELD_TAGS.values())

# A scalar event is well under 1 KB; a larger record (an image, a histogram, a graph) is stepped over.
MAX_SCALAR_RECORD = 65536
# what one poll reads at most of a file
POLL_MAX_BYTES = 1048576
# what the collect step reads at most of a file (it is fetched under pretrain_fetch_max_mb anyway)
FILE_MAX_BYTES = 1024 * 1048576
# Lightning's metrics.csv: its header, and the rows at its end that one poll reads
CSV_HEADER_MAX_BYTES = 65536
CSV_TAIL_BYTES = 262144
# where the files are looked for: this deep under each directory, this many entries looked at
SEARCH_DEPTH = 4
SEARCH_MAX_ENTRIES = 20000
# directories not entered: hidden ones, Python's caches, and checkpoints (thousands of shards, never
# an event file): the Hugging Face Trainer's checkpoint-N, the reference trainer's step_N, DeepSpeed's
# global_stepN, Megatron-LM's iter_N, torchtitan's step-N, Lightning's epoch=E-step=N.ckpt (a directory when sharded)
SKIPPED_DIRS = (".", "__pycache__", "checkpoint-", "step_", "step-", "global_step", "iter_", "epoch=")
# the newest files that one poll reads
FILES_READ = 4
# the newest files the collect step fetches and reads whole (one a start of the job, as a rule)
FILES_COLLECTED = 64
# tags remembered per file beyond the wanted ones, to name them when none is a loss tag known here
OTHER_TAGS_KEPT = 24
# a state's files are looked for again after this many seconds, or after this many when they hold no progress
SEARCH_INTERVAL_S = 60
SEARCH_AGAIN_S = 10
# bytes of a tag kept (a longer one is no tag of ours)
TAG_MAX = 200


class Malformed(ValueError):
    """Data that is no Event (or no record) the reader takes."""


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _bit in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def masked_crc32c(data):
    """TFRecord's masked CRC-32C (Castagnoli) of data."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


_LENGTH = struct.Struct("<QI")
_CRC = struct.Struct("<I")
HEADER = 12
FOOTER = 4


def _header(buf, at):
    """The data length of a record whose header is at buf[at:], or None when its CRC does not match."""
    length, crc = _LENGTH.unpack_from(buf, at)
    return length if masked_crc32c(buf[at:at + 8]) == crc else None


def _data_ok(buf, at, length):
    start = at + HEADER
    return masked_crc32c(buf[start:start + length]) == _CRC.unpack_from(buf, start + length)[0]


def sync(buf, begin=0, end=None):
    """The offset in buf (from begin) of the first record boundary: a header whose CRC matches,
    followed (when the record lies within buf and is small) by data whose CRC matches; None when
    there is none. Candidates are found in C: a length under 16 MiB has zero bytes at [3:8]."""
    end = len(buf) if end is None else end
    zeros = b"\0" * 5
    at = begin
    while True:
        run = buf.find(zeros, at, end)
        if run < 0:
            return None
        stop = run + 5
        while stop < end and buf[stop] == 0:
            stop += 1
        for candidate in range(max(run - 3, begin), stop - 7):
            if candidate + HEADER > end:
                return None
            length = _header(buf, candidate)
            if length is None:
                continue
            if candidate + HEADER + length + FOOTER > end or length > MAX_SCALAR_RECORD:
                return candidate
            if _data_ok(buf, candidate, length):
                return candidate
        at = stop


def _varint(buf, at, end):
    result = shift = 0
    while True:
        if at >= end or shift > 63:
            raise Malformed("a varint runs past its field")
        byte = buf[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, at
        shift += 7


def _fields(buf, at, end):
    """(number, wire type, value) of each field of the message buf[at:end]; a length-delimited
    value is its (start, end)."""
    while at < end:
        key, at = _varint(buf, at, end)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(buf, at, end)
        elif wire == 1:
            value, at = buf[at:at + 8], at + 8
        elif wire == 2:
            size, at = _varint(buf, at, end)
            value, at = (at, at + size), at + size
        elif wire == 5:
            value, at = buf[at:at + 4], at + 4
        else:
            raise Malformed("wire type %d" % wire)
        if at > end:
            raise Malformed("a field runs past its message")
        yield number, wire, value


# TensorProto dtypes whose scalar is read: float, double, int32, int64
_DT_FLOAT, _DT_DOUBLE, _DT_INT32, _DT_INT64 = 1, 2, 3, 9
_CONTENT = {_DT_FLOAT: "<f", _DT_DOUBLE: "<d", _DT_INT32: "<i", _DT_INT64: "<q"}


def _float32(data):
    """The float of 4 bytes, written with the fewest digits that give the same float32 (2.31, not
    2.309999942779541): what the trainer logged."""
    value = struct.unpack("<f", data)[0]
    if not math.isfinite(value):
        return value
    for digits in range(6, 10):
        short = float("%.*g" % (digits, value))
        if struct.pack("<f", short) == bytes(data):
            return short
    return value


def _signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def _tensor_scalar(buf, at, end):
    """The one number of a TensorProto (a scalar summary's tensor), or None."""
    dtype, values, dims = None, [], 0
    content = None
    for number, wire, value in _fields(buf, at, end):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 2 and wire == 2:  # tensor_shape: a scalar has no dims
            dims += sum(1 for n, _w, _v in _fields(buf, value[0], value[1]) if n == 2)
        elif number == 4 and wire == 2:
            content = bytes(buf[value[0]:value[1]])
        elif number in (5, 6) and wire == 2:  # packed float_val / double_val
            form = "<f" if number == 5 else "<d"
            size = struct.calcsize(form)
            data = buf[value[0]:value[1]]
            values.extend(struct.unpack_from(form, data, i)[0] for i in range(0, len(data) - size + 1, size))
        elif number == 5 and wire == 5:
            values.append(_float32(value))
        elif number == 6 and wire == 1:
            values.append(struct.unpack("<d", value)[0])
        elif number in (7, 10) and wire == 0:  # int_val, int64_val
            values.append(_signed(value))
        elif number in (7, 10) and wire == 2:
            i, stop = value
            while i < stop:
                item, i = _varint(buf, i, stop)
                values.append(_signed(item))
    if dims:
        return None
    if content is not None and dtype in _CONTENT:
        size = struct.calcsize(_CONTENT[dtype])
        return struct.unpack(_CONTENT[dtype], content)[0] if len(content) == size else None
    return values[0] if len(values) == 1 else None


def parse_event(buf):
    """(wall_time, step, [(tag, number)]) of a serialized Event; raises Malformed. A tag that is no
    UTF-8 or longer than TAG_MAX, and a value that is no scalar, are left out."""
    buf = memoryview(buf)
    wall_time, step, scalars = None, 0, []
    for number, wire, value in _fields(buf, 0, len(buf)):
        if number == 1 and wire == 1:
            wall_time = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            step = _signed(value)
        elif number == 5 and wire == 2:
            for vnumber, vwire, item in _fields(buf, value[0], value[1]):
                if vnumber != 1 or vwire != 2:
                    continue
                tag, number_ = None, None
                for fnumber, fwire, fvalue in _fields(buf, item[0], item[1]):
                    if fnumber == 1 and fwire == 2 and fvalue[1] - fvalue[0] <= TAG_MAX:
                        try:
                            tag = bytes(buf[fvalue[0]:fvalue[1]]).decode("utf-8")
                        except UnicodeDecodeError:
                            tag = None
                    elif fnumber == 2 and fwire == 5:
                        number_ = _float32(fvalue)
                    elif fnumber == 8 and fwire == 2:
                        number_ = _tensor_scalar(buf, fvalue[0], fvalue[1])
                if tag is not None and isinstance(number_, (int, float)):
                    scalars.append((tag, number_))
    if wall_time is not None and not math.isfinite(wall_time):
        wall_time = None
    return wall_time, step, scalars


def read_records(handle, start, size, max_bytes, synced=True, sink=None, keep=None, chunk=4 * 1048576):
    """Reads the records of an open event file from start up to size, reading at most max_bytes,
    chunk bytes at a time; start is a record boundary when synced, else any offset (the first
    boundary after it is found by sync). Each event parsed, (wall_time, step, scalars), goes to
    sink (default: the list returned); with keep, only a record whose data keep(data) takes is
    checked and parsed (the others are stepped over: their length's CRC matched).
    Returns (events or None with a sink, offset, unreadable, synced): where the next read starts
    (after the last whole record: one still being written is left for it); how many records or
    stretches of the file did not check (a CRC that does not match, data that is no Event: the
    reader finds the next boundary and goes on); and whether that offset is a boundary."""
    events = [] if sink is None else None
    sink = events.append if sink is None else sink
    unreadable, offset, budget = 0, start, max_bytes
    while offset < size and budget > 0:
        handle.seek(offset)
        buf = handle.read(min(size - offset, budget, chunk))
        if not buf:
            break
        budget -= len(buf)
        end, at = len(buf), 0
        if not synced:
            found = sync(buf)
            if found is None:
                # none here: a header cut by the buffer's end is looked for in the next read
                offset += max(end - HEADER + 1, 1)
                continue
            at, synced = found, True
        while at + HEADER <= end:
            length = _header(buf, at)
            stop = at + HEADER + (length or 0) + FOOTER
            if length is not None and offset + stop > size:
                return events, offset + at, unreadable, True  # still being written
            if length is not None and length > MAX_SCALAR_RECORD:
                at = stop  # stepped over unread
                continue
            if length is not None and stop > end:
                if at == 0 and budget > 0:
                    chunk = max(chunk, stop)  # a record longer than a chunk (up to MAX_SCALAR_RECORD)
                break  # the next read starts with it
            if length is not None and keep is not None and not keep(buf[at + HEADER:at + HEADER + length]):
                at = stop
                continue
            if length is not None and _data_ok(buf, at, length):
                try:
                    sink(parse_event(buf[at + HEADER:at + HEADER + length]))
                except Malformed:
                    unreadable += 1
                at = stop
                continue
            unreadable += 1
            found = sync(buf, at + 1)
            if found is None:
                synced = False
                at = max(at + 1, end - HEADER + 1)
                break
            at = found
        offset += at
    return events, offset, unreadable, synced


def records(path, max_bytes=FILE_MAX_BYTES, sink=None, keep=None):
    """(events, or None with a sink; unreadable) of a whole event file (at most max_bytes of it)."""
    handle, info = open_regular(path)
    with handle:
        size = min(info.st_size, max_bytes)
        events, _offset, unreadable, _synced = read_records(handle, 0, size, size, sink=sink, keep=keep)
    return events, unreadable


def shown(name, tag=None):
    """Whether the scalar of a tag is one progress may show (a loss, val loss, lr or tokens/s tag, or tag)."""
    return name == tag or name in WANTED or name.startswith(LR_PREFIXES)


def wanted(tag=None):
    """keep for read_records: data that names a tag progress may show (or tag; shown()), found in C."""
    needles = [t.encode("utf-8") for t in sorted(WANTED | ({tag} if tag else set()))]
    needles += [prefix.encode() for prefix in LR_PREFIXES]

    def keep(data):
        return any(needle in data for needle in needles)
    return keep


def _number(text):
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def csv_rows(text):
    """[(step, {column: number})] of the rows of Lightning's metrics.csv text (its header first), a
    row without a step or an empty cell left out."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except (StopIteration, csv.Error):
        return []
    if "step" not in header:
        return []
    step_at = header.index("step")
    rows = []
    try:
        for row in reader:
            if len(row) != len(header):
                continue
            step = _number(row[step_at])
            if not isinstance(step, int) or step < 0:
                continue
            values = {}
            for name, cell in zip(header, row):
                if name != "step" and cell and len(name) <= TAG_MAX:
                    value = _number(cell)
                    if value is not None:
                        values[name] = value
            rows.append((step, values))
    except csv.Error:
        pass
    return rows


def open_regular(path):
    """The file at path opened for reading, and its stat: never through a link at its last part,
    never waiting on a FIFO (another user's or a job's file may be planted where one was found);
    OSError when it is no regular file."""
    handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), "rb")
    info = os.fstat(handle.fileno())
    if not stat.S_ISREG(info.st_mode):
        handle.close()
        raise OSError("%s is not a regular file" % path)
    return handle, info


def read_csv(path, tail=CSV_TAIL_BYTES):
    """(the rows of a metrics.csv's header and its last `tail` bytes (whole lines), its stat): a poll's read."""
    handle, info = open_regular(path)
    with handle:
        head = handle.read(CSV_HEADER_MAX_BYTES)
        if info.st_size > len(head):
            handle.seek(max(info.st_size - tail, 0))
            head = head.split(b"\n", 1)[0] + b"\n" + handle.read(tail).split(b"\n", 1)[-1]
    return csv_rows(head.decode("utf-8", "replace")), info


def find(dirs, uid=None, depth=SEARCH_DEPTH, max_entries=SEARCH_MAX_ENTRIES):
    """[(mtime, path)] of the event files and Lightning metrics.csv files (in a version_* directory)
    under dirs, newest first: regular files (no link followed), owned by uid (default: this
    process's user), looked for at most depth levels down and among at most max_entries entries,
    breadth first; the directories of SKIPPED_DIRS are not entered."""
    uid = os.getuid() if uid is None else uid
    found, seen, pending = [], set(), [(d, 0) for d in dirs if d]
    entries = 0
    while pending and entries < max_entries:
        top, level = pending.pop(0)
        try:
            real = os.path.realpath(top)
            if real in seen:
                continue
            seen.add(real)
            scan = os.scandir(top)
        except OSError:
            continue
        with scan:
            for entry in scan:
                entries += 1
                if entries > max_entries:
                    break
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(info.st_mode):
                    if level + 1 < depth and not entry.name.startswith(SKIPPED_DIRS):
                        pending.append((entry.path, level + 1))
                elif stat.S_ISREG(info.st_mode) and info.st_uid == uid and (
                        entry.name.startswith(EVENT_FILE_PREFIX) or entry.name == CSV_FILE
                        and os.path.basename(top).startswith("version_")):
                    found.append((info.st_mtime, entry.path))
    found.sort(key=lambda item: (-item[0], item[1]))
    return found


def _update(last, tag, step, value, wall_time):
    """last[tag] = [step, value, wall time, the step before, its wall time]: the step before gives the
    seconds per step, for an ETA."""
    before = last.get(tag)
    if isinstance(before, list) and len(before) == 5 and isinstance(before[0], int) and before[0] < step:
        last[tag] = [step, value, wall_time, before[0], before[2]]
    elif isinstance(before, list) and len(before) == 5 and before[0] == step:
        last[tag] = [step, value, wall_time, before[3], before[4]]
    else:
        last[tag] = [step, value, wall_time, None, None]


def _keep(last, others, tag, step, value, wall_time, wanted=None):
    """Keeps the value of a tag progress may show (or wanted); names a few others."""
    if shown(tag, wanted):
        _update(last, tag, step, value, wall_time)
    elif tag not in others and len(others) < OTHER_TAGS_KEPT:
        others.append(tag)


def poll(dirs, state, tag=None, now=None, max_bytes=POLL_MAX_BYTES, since=None):
    """One poll of the watch: reads what the newest event and CSV files under dirs got since the
    state (a dict the caller keeps between polls, {} at first) and returns (progress or None, the
    new state, warnings [text]). progress: step, loss, val_loss, lr, tokens_per_s of the newest
    file with a loss, its tag and path; with since (a time), of a file written since then only (the
    job's start: a file an earlier job left is not its progress)."""
    now = time.time() if now is None else now
    state = state if isinstance(state, dict) else {}
    files = state.get("files") if isinstance(state.get("files"), list) else None
    # the files are looked for again every SEARCH_INTERVAL_S, and, at most every SEARCH_AGAIN_S,
    # whenever those known show no progress (none yet, or a new start of the job writes a new file)
    found_at = state.get("found_at") if isinstance(state.get("found_at"), (int, float)) else None
    due = files is None or found_at is None or not 0 <= now - found_at <= SEARCH_INTERVAL_S
    while True:
        if due:
            state = dict(state, files=[path for _mtime, path in find(dirs)[:FILES_READ]], found_at=now)
        state, warnings = _read(state, tag, max_bytes)
        progress = progress_from(state, tag, since)
        if progress is not None or due or now - found_at < SEARCH_AGAIN_S:
            return progress, state, warnings
        due = True


def _read(state, tag, max_bytes):
    """The state after reading what its files got; warnings of records that did not check."""
    read = state.get("read") if isinstance(state.get("read"), dict) else {}
    kept, warnings = {}, []
    for path in [f for f in state["files"] if isinstance(f, str)][:FILES_READ]:
        known = read.get(path) if isinstance(read.get(path), dict) else {}
        try:
            kept[path] = _poll_file(path, known, tag, max_bytes)
        except OSError:
            continue
        if kept[path].get("bad", 0) > (known.get("bad") or 0):
            warnings.append("%s: %d stretches hold no record whose CRC matches (a file not written as TensorBoard "
                            "writes it, or damaged); progress is read from the records around them"
                            % (path, kept[path]["bad"]))
    return dict(state, read=kept), warnings


def _poll_file(path, known, tag, max_bytes):
    """The state of one file after reading what it got since known."""
    last = known.get("last") if isinstance(known.get("last"), dict) else {}
    others = [t for t in known.get("others", []) if isinstance(t, str)] if isinstance(known.get("others"), list) else []
    bad = known.get("bad") if isinstance(known.get("bad"), int) else 0
    if os.path.basename(path) == CSV_FILE:
        rows, info = read_csv(path)
        last, others = {}, []
        for step, values in rows:
            for name, value in values.items():
                _keep(last, others, name, step, value, None, tag)
        return dict(last=last, others=others, bad=0, csv=True, mtime=info.st_mtime)
    handle, info = open_regular(path)
    with handle:
        offset = known.get("offset")
        if (known.get("ino") == info.st_ino and isinstance(offset, int) and 0 <= offset <= info.st_size
                and info.st_size - offset <= max_bytes):
            synced = known.get("synced") is not False
        else:
            # met for the first time, replaced, or grown by more than a poll reads: its end
            offset = max(info.st_size - max_bytes, 0)
            synced = offset == 0
            if known.get("ino") != info.st_ino:
                last, others, bad = {}, [], 0
        events, offset, unreadable, synced = read_records(handle, offset, info.st_size, max_bytes, synced)
    for wall_time, step, scalars in events:
        for name, value in scalars:
            _keep(last, others, name, step, value, wall_time, tag)
    return dict(ino=info.st_ino, offset=offset, synced=synced, last=last, others=others, bad=bad + unreadable,
                mtime=info.st_mtime)


def loss_tag(found, tag=None):
    """The loss's tag among found (tags): tag when given, else the first of LOSS_TAGS found."""
    if tag:
        return tag if tag in found else None
    return next((t for t in LOSS_TAGS if t in found), None)


def field_tag(found, name):
    """The tag of a field (FIELD_TAGS) among found, the first of its list; for lr also lr-*."""
    tag = next((t for t in FIELD_TAGS[name] if t in found), None)
    if tag is None and name == "lr":
        tag = next((t for t in sorted(found) if t.startswith(LR_PREFIXES)), None)
    return tag


def _value(item, index, finite=True):
    if not isinstance(item, list) or len(item) != 5:
        return None
    value = item[index]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if finite and isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# the metrics fields of progress_from's progress (with source, tag, file, seconds_per_step and wall)
PROGRESS_FIELDS = ("step", "loss", "val_loss", "lr", "tokens_per_s")


def progress_from(state, tag=None, since=None):
    """Progress of the newest file of the state that holds a loss (see poll), or None; with
    `tags` (the tags seen, when no file holds a loss: to name them)."""
    read = state.get("read") if isinstance(state.get("read"), dict) else {}
    for path in state.get("files", []):
        known = read.get(path)
        if not isinstance(known, dict) or not isinstance(known.get("last"), dict):
            continue
        if since is not None and isinstance(known.get("mtime"), (int, float)) and known["mtime"] < since:
            continue
        last = known["last"]
        name = loss_tag(last, tag)
        if name is None:
            continue
        step = _value(last[name], 0)
        loss = _value(last[name], 1, finite=False)
        if not isinstance(step, int) or step < 0 or loss is None:
            continue
        wall, before, before_wall = (_value(last[name], i) for i in (2, 3, 4))
        progress = dict(step=step, loss=loss, source="csv" if known.get("csv") else "events", tag=name, file=path,
                        seconds_per_step=None, wall=wall)
        if isinstance(before, int) and 0 <= before < step and wall is not None and before_wall is not None:
            progress["seconds_per_step"] = max(wall - before_wall, 0.0) / (step - before)
        for field in FIELD_TAGS:
            found = field_tag(last, field)
            progress[field] = _value(last[found], 1) if found else None
        return progress
    return None


def tags_seen(state):
    """The scalar tags the state's files hold (for the message that none is a loss tag known here)."""
    read = state.get("read") if isinstance(state.get("read"), dict) else {}
    seen = []
    for known in read.values():
        if isinstance(known, dict):
            for name in list(known.get("last") or {}) + list(known.get("others") or []):
                if isinstance(name, str) and name not in seen:
                    seen.append(name)
    return seen


def _file_time(path):
    """The time an event file's name carries (events.out.tfevents.<time>.<host>...), else 0."""
    part = os.path.basename(path)[len(EVENT_FILE_PREFIX):].split(".", 1)[0]
    return whole(part, 0)


# the fields a converted record may carry besides step and loss
_RECORD_FIELDS = tuple(FIELD_TAGS)


def metrics_of(paths, tag=None, total_steps=None, max_bytes=FILE_MAX_BYTES):
    """The collect step's metrics from whole event files (or, where none holds a loss, Lightning
    metrics.csv files): {records: [{step, loss, val_loss, lr, tokens_per_s, total_steps, source}] in
    the files' order (oldest file first: a later record of a step replaces an earlier one in the
    report), source (events, csv or None), tag, files (those that gave records), tags (the scalars
    seen, when no loss tag was found), unreadable (records whose CRC did not match, files that could
    not be read)}. Of each file only the records of the tags progress shows are checked and kept,
    as two arrays a tag (its steps and values): a week's file is read in memory of its records of
    those tags. A field's value goes on the loss record of its step, or else on the last one before
    it that lacks it (an evaluation logged after its step's loss)."""
    events = sorted((p for p in paths if os.path.basename(p).startswith(EVENT_FILE_PREFIX)),
                    key=lambda p: (_file_time(p), p))
    tables = sorted(p for p in paths if os.path.basename(p) == CSV_FILE)
    keep = wanted(tag)
    unreadable, per_file = 0, []
    for path in events:
        series = {}
        try:
            _events, bad = records(path, max_bytes, sink=_sink(series, tag), keep=keep)
        except OSError:
            unreadable += 1
            continue
        unreadable += bad
        per_file.append((path, "events", series))
    for path in tables:
        series = {}
        try:
            handle, _info = open_regular(path)
            with handle:
                rows = csv_rows(handle.read(max_bytes).decode("utf-8", "replace"))
        except OSError:
            unreadable += 1
            continue
        for step, values in rows:
            if step <= MAX_STEP:
                for name, value in values.items():
                    _append(series, name, step, value, tag)
        per_file.append((path, "csv", series))
    out = dict(records=[], source=None, tag=None, files=[], tags=[], unreadable=unreadable)
    for kind in ("events", "csv"):
        found = set(name for _path, source, series in per_file if source == kind for name in series)
        name = loss_tag(found, tag)
        if name is None:
            continue
        fields = dict((field, field_tag(found, field)) for field in _RECORD_FIELDS)
        for path, source, series in per_file:
            if source == kind and name in series:
                out["records"].extend(_records_of(series, name, fields, total_steps, kind))
                out["files"].append(path)
        out.update(source=kind, tag=name)
        return out
    # none holds a loss: the scalars their first MiB holds, to name them
    seen = [name for _path, source, series in per_file if source == "csv" for name in series]
    for path in events:
        try:
            head, _bad = records(path, POLL_MAX_BYTES)
        except OSError:
            continue
        seen += [name for _wall, _step, scalars in head for name, _value in scalars]
    out["tags"] = list(dict.fromkeys(seen))[:OTHER_TAGS_KEPT]
    return out


# the largest step kept (int64 in an array)
MAX_STEP = 2 ** 63 - 1


def _sink(series, tag):
    """sink for read_records: each scalar of a tag progress may show into series."""
    def sink(parsed):
        _wall, step, scalars = parsed
        if 0 <= step <= MAX_STEP:
            for name, value in scalars:
                _append(series, name, step, value, tag)
    return sink


def _append(series, name, step, value, tag):
    """Adds (step, value) to the arrays of name, a tag progress may show (or tag)."""
    if shown(name, tag):
        if name not in series:
            series[name] = (array.array("q"), array.array("d"))
        series[name][0].append(step)
        series[name][1].append(float(value))


def _records_of(series, name, fields, total_steps, source):
    """The loss records of one file's series {tag: (steps, values)}: each field's value on the
    record of its step, or else on the last one before it that lacks it."""
    steps, values = series[name]
    kept, by_step = [], {}
    for step, value in zip(steps, values):
        record = dict(step=step, loss=value, source=source)
        if total_steps:
            record["total_steps"] = total_steps
        kept.append(record)
        by_step[step] = record
    ordered = [record["step"] for record in kept]
    for field, tag in fields.items():
        if not tag or tag not in series:
            continue
        for step, value in zip(*series[tag]):
            if not math.isfinite(value):
                continue
            record = by_step.get(step)
            if record is None:
                at = bisect.bisect_right(ordered, step) - 1
                while at >= 0 and field in kept[at]:
                    at -= 1
                record = kept[at] if at >= 0 else None
            if record is not None:
                record[field] = value
    return kept
