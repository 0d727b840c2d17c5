"""TensorBoard event files, written without TensorBoard: scalars as `tensorboard --logdir`
reads them, from the trainer's rank 0, with nothing to install on the nodes.

An event file is a sequence of TFRecords (length, masked CRC-32C of the length, data, masked
CRC-32C of the data), each holding one `Event` protocol buffer: the first names the format
(`brain.Event:2`), the others carry a step, a wall time and a summary of tagged scalars. A run
that resumes from the checkpoint of step N writes a `SessionLog` START at step N + 1, so
TensorBoard drops what the earlier start logged after N (its "orphaned data" purge) and shows
one trajectory.
"""

import os
import socket
import struct
import time
from pathlib import Path


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _bit in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli), as TFRecord uses it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tf_record(data):
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number, wire_type):
    return _varint(number << 3 | wire_type)


def _bytes_field(number, payload):
    return _field(number, 2) + _varint(len(payload)) + payload


def event(wall_time, step=None, file_version=None, scalars=None, session_start=False):
    """One serialized `Event`: wall_time (1, double), step (2, int64), file_version (3, string),
    summary (5: Summary of Value{tag (1), simple_value (2, float)}), session_log (7: status START)."""
    out = _field(1, 1) + struct.pack("<d", wall_time)
    if step is not None:
        out += _field(2, 0) + _varint(int(step))
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5) + struct.pack("<f", value))
                          for tag, value in scalars.items())
        out += _bytes_field(5, values)
    if session_start:
        out += _bytes_field(7, _field(1, 0) + _varint(1))  # SessionLog.status = START
    return out


class EventWriter:
    """Scalars of a run to <log_dir>/events.out.tfevents.<time>.<host>.<pid>.<n>, a new file for
    each start of the run; every write is flushed (they come at the log interval)."""

    def __init__(self, log_dir, resumed_step=0):
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        stem, n = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}", 0
        while (log_dir / f"{stem}.{n}").exists():
            n += 1
        self.path = log_dir / f"{stem}.{n}"
        self.file = open(self.path, "xb")
        self._write(event(time.time(), step=0, file_version="brain.Event:2"))
        if resumed_step:
            # TensorBoard drops what it has at this step and after: the steps after the checkpoint
            self._write(event(time.time(), step=resumed_step + 1, session_start=True))

    def _write(self, data):
        self.file.write(tf_record(data))
        self.file.flush()

    def scalars(self, step, values):
        """values: {tag: number}; None values are left out."""
        values = {tag: float(value) for tag, value in values.items() if value is not None}
        if values:
            self._write(event(time.time(), step=step, scalars=values))

    def close(self):
        self.file.close()
