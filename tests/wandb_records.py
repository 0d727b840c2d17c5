"""What W&B saved of a run in its offline mode, read back from its own files (tests of the
trainer and of the pipeline)."""

import json
from pathlib import Path


def wandb_test_env(home):
    """The environment of a test run that logs to W&B: no error reports sent anywhere, and W&B's
    own settings and caches under home, not in the user's home directory."""
    home = Path(home)
    return {"WANDB_ERROR_REPORTING": "false", "WANDB_CONFIG_DIR": str(home / "wandb-home" / "config"),
            "WANDB_CACHE_DIR": str(home / "wandb-home" / "cache"), "WANDB_DATA_DIR": str(home / "wandb-home" / "data"),
            "WANDB_ARTIFACT_DIR": str(home / "wandb-home" / "artifacts")}


def wandb_history(run_dir):
    """{step: {key: value}} of what the trainer logged to W&B offline under run_dir/wandb, read
    from the offline runs' .wandb files (W&B's record log: a 7-byte file header, then 32 KiB
    blocks of chunks, each a CRC-32C, a 2-byte length and a type (1 whole, 2 first, 3 middle,
    4 last) before its bytes, the records being W&B's own protocol buffers). Starts are read in
    order; like W&B, the first value logged at a step is kept."""
    from wandb.proto import wandb_internal_pb2  # pylint: disable=import-outside-toplevel

    history = {}
    for path in sorted(Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")):
        data = path.read_bytes()
        assert data[:4] == b":W&B", f"{path} is not a W&B record log"
        pos, record = 7, b""
        while pos + 7 <= len(data):
            if (pos % 32768) + 7 > 32768:  # no room for a chunk header: the block's padding
                pos += 32768 - pos % 32768
                continue
            length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
            if length == 0 and kind == 0:  # zeros to the end of the block
                pos += 32768 - pos % 32768
                continue
            record += data[pos + 7:pos + 7 + length]
            pos += 7 + length
            if kind in (1, 4):
                message = wandb_internal_pb2.Record()
                message.ParseFromString(record)
                record = b""
                if message.WhichOneof("record_type") == "history":
                    items = {item.key or "/".join(item.nested_key): json.loads(item.value_json)
                             for item in message.history.item}
                    history.setdefault(items["_step"], {k: v for k, v in items.items() if not k.startswith("_")})
    return history
