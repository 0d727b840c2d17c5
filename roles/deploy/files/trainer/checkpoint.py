"""Checkpoints: written atomically, the newest K kept, the newest loadable one found.

A checkpoint is one of two kinds, and a run resumes from either:

- ``<run>/checkpoints/step_NNNNNN.pt`` (--parallel ddp, one process): a dict saved with
  torch.save that loads with ``weights_only=True`` (tensors, numbers, strings, lists, dicts);
- ``<run>/checkpoints/step_NNNNNN/`` (--parallel fsdp): a torch.distributed.checkpoint
  directory, one shard file per rank of the model and optimizer state (keys ``model.*`` and
  ``optimizer.*``) and ``trainer_state.pt``, the rest of the dict above, written by rank 0.
  It is written as a hidden temp directory and renamed into place once complete. Its
  ``.metadata`` (a pickle) is read by MetadataUnpickler, which builds DCP's metadata types and
  nothing else, here and in dcp.load, and must name shard files inside the directory (at offsets
  and lengths of whole numbers); none of its files may be a symbolic link. The shards' non-tensor
  values (the optimizer's param_groups) load with ``weights_only=True``.
"""

import errno
import os
import pickle
import re
import shutil
import stat
import sys
import time
import warnings
import zipfile
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, DefaultLoadPlanner, FileSystemReader, Metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.metadata import StorageMeta

from .config import ConfigError
from .fsio import atomic_file, fsync_dir, remove_temp_files

CHECKPOINT_DIR = "checkpoints"
FORMAT = 1
REQUIRED_KEYS = ("format", "step", "model", "model_config")
NAME = re.compile(r"^step_([0-9]+)(\.pt)?$")  # ASCII digits: \d and int() take any script's
TRAINER_STATE = "trainer_state.pt"  # in a sharded checkpoint: all but the model and optimizer tensors
SHARDED_KEYS = ("model", "optimizer")  # what a sharded checkpoint holds in its shards
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile
BAD_SUFFIX = ".bad"
# Seconds between attempts to read a checkpoint: a shared file system's errors (EIO, ESTALE)
# often pass, and a file they hide must not be taken for a corrupt one.
READ_RETRY_DELAYS_S = (1.0, 3.0)
# What torch.load raises for a truncated or garbled file. A truncated zip makes its reader
# seek before the file's start: OSError EINVAL (ValueError from a buffer).
CORRUPT_ERRORS = (pickle.UnpicklingError, EOFError, ValueError, zipfile.BadZipFile)
STREAM_READER_ERROR = "PytorchStreamReader failed"
# The globals a DCP .metadata pickle names (torch 2.13's dcp.save to a directory: its Metadata,
# FileSystemWriter's storage data, the checkpoint's path); a pickle that names any other is refused
# before that global is looked up, let alone called.
_PATHS = frozenset({"Path", "PosixPath", "PurePosixPath"})
METADATA_GLOBALS = {
    "torch.distributed.checkpoint.metadata": frozenset({
        "Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
        "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING"}),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    # torch.Size and the dtypes, by name; vars(): torch's module __getattr__ imports submodules
    "torch": frozenset({"Size"} | {name for name, value in vars(torch).items() if isinstance(value, torch.dtype)}),
    "torch.serialization": frozenset({"_get_layout"}),  # a torch.layout from its name
    "pathlib": _PATHS,
    "pathlib._local": _PATHS,  # where Python 3.13 pickles them from
}
SHOWN_REASON_CHARS = 300
# How torch.load's weights_only refusal names the global a value's pickle calls (posix.system)
REFUSED_GLOBAL = re.compile(r"GLOBAL (\S+)")


class CheckpointError(RuntimeError):
    pass


class CorruptCheckpoint(CheckpointError):
    """A checkpoint file that was read but does not deserialize: no retry makes it load."""


def shown(text):
    """Text a checkpoint's bytes may have put in an error: escaped (no terminal control), bounded."""
    return ascii(str(text))[1:-1][:SHOWN_REASON_CHARS]


def refusal(error):
    """What torch.load's error of a value says about it, shown: the global it names that weights_only
    refused (found past torch's own advice, which the bound would keep), or the error itself."""
    refused = REFUSED_GLOBAL.search(str(error))
    return shown(f"names the global {refused.group(1)}, which is not plain data" if refused
                 else f"does not load ({type(error).__name__}: {error})")


def checkpoint_path(ckpt_dir, step, sharded=False):
    return Path(ckpt_dir) / (f"step_{step:06d}" if sharded else f"step_{step:06d}.pt")


def is_sharded(path):
    return Path(path).suffix != ".pt"


def list_checkpoints(ckpt_dir):
    """[(step, path)] of the checkpoints in ckpt_dir (files and sharded directories), oldest first."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found = [(int(m.group(1)), ckpt_dir / m.group(0)) for m in map(NAME.match, os.listdir(ckpt_dir))
             if m and (ckpt_dir / m.group(0)).is_dir() == (m.group(2) is None)]
    return sorted(found)


def remove_checkpoint(path):
    if is_sharded(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def keep_newest(ckpt_dir, step, keep):
    """Remove all but the newest `keep` checkpoints up to step, of both kinds."""
    older = [p for s, p in list_checkpoints(ckpt_dir) if s <= step]
    for old in older[:-keep]:
        remove_checkpoint(old)


def strip_wrapper_prefixes(state_dict):
    """Model state dict keys as an unwrapped model names them."""
    clean = {}
    for key, value in state_dict.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        clean[key] = value
    return clean


def save_checkpoint(state, ckpt_dir, keep):
    """Write state as the checkpoint of state["step"]; keep the newest `keep` up to it.

    Checkpoints numbered after it are never removed: resume starts from the newest one
    that loads, so any after it are ones a user put back, or the work of another writer.
    """
    ckpt_dir = Path(ckpt_dir)
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    step = state["step"]
    path = checkpoint_path(ckpt_dir, step)
    with atomic_file(path) as f:
        torch.save(state, f)
    keep_newest(ckpt_dir, step, keep)
    return path


def sharded_temp_path(ckpt_dir, step):
    """Where every rank writes its shard of step's sharded checkpoint: one name for all ranks
    (rank 0's pid would differ from theirs), hidden, and removed as a partial write at start-up."""
    return checkpoint_path(ckpt_dir, step, sharded=True).with_name(f".step_{step:06d}.tmp-sharded")


def save_sharded(tensors, state, ckpt_dir, keep, is_main, barrier=None):
    """Write the sharded checkpoint of state["step"]; every rank calls this. tensors: the
    model and optimizer state of get_state_dict, each rank's shard. Rank 0 then adds state
    (everything else) and renames the directory into place; returns its final path.
    barrier: every rank's wait for the others (the process group's), after rank 0 has cleared
    the temporary directory: a rank that came to the checkpoint before rank 0 (which writes the
    metrics first) had made it, and rank 0 removed it under the shards being written."""
    ckpt_dir = Path(ckpt_dir)
    step = state["step"]
    path, tmp = checkpoint_path(ckpt_dir, step, sharded=True), sharded_temp_path(ckpt_dir, step)
    if is_main:
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    if barrier is not None:
        barrier()
    try:
        # returns on every rank once every shard and rank 0's .metadata are written (and fsynced)
        dcp.save(tensors, checkpoint_id=tmp)
        if is_main:
            with atomic_file(tmp / TRAINER_STATE) as f:
                torch.save(state, f)
            if path.exists():  # the same step written before, by a run that was stopped later
                remove_checkpoint(path)
            os.replace(tmp, path)
            fsync_dir(ckpt_dir)
            keep_newest(ckpt_dir, step, keep)
    except BaseException:
        if is_main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def is_corruption(error):
    """Whether torch.load's error means the file's bytes are wrong (truncated, garbled),
    not that they could not be read or held (EIO, ESTALE, out of memory)."""
    if isinstance(error, OSError):
        return error.errno == errno.EINVAL
    if isinstance(error, RuntimeError):
        return STREAM_READER_ERROR in str(error)
    return isinstance(error, CORRUPT_ERRORS)


def read_state(path):
    """torch.load of path, on the CPU. A read error is retried after each of
    READ_RETRY_DELAYS_S, then raised as CheckpointError; corrupt bytes raise CorruptCheckpoint."""
    for attempt, delay in enumerate((*READ_RETRY_DELAYS_S, None), start=1):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # sorted below: corrupt bytes, a read error to retry, anything else
            if is_corruption(e):
                raise CorruptCheckpoint(f"{path} {refusal(e)}") from e
            if not isinstance(e, OSError):
                raise
            if delay is None:
                raise CheckpointError(f"{path} could not be read ({type(e).__name__}: {shown(e)}, {attempt} attempts); "
                                      "nothing was moved or removed: run again once the file system answers") from e
            print(f"warning: reading {path} failed ({type(e).__name__}: {shown(e)}); trying again in {delay:g} s",
                  file=sys.stderr, flush=True)
            time.sleep(delay)


class MetadataUnpickler(pickle.Unpickler):
    """An unpickler of DCP metadata: a global the pickle names outside METADATA_GLOBALS (os.system,
    a class of any other module) raises UnpicklingError instead of being imported or called."""

    def find_class(self, module, name):
        if name in METADATA_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it names the global {module}.{name}, which is not one of DCP's metadata types")


def is_shard_name(name):
    """Whether name (a shard's relative_path in DCP metadata) is a plain file name, as DCP writes
    them (__0_0.distcp): no directory part, no .., not absolute, nothing unprintable."""
    return isinstance(name, str) and name == os.path.basename(name) and name not in ("", ".", "..") and name.isprintable()


class MetadataReader(FileSystemReader):
    """torch's FileSystemReader, whose .metadata is read by MetadataUnpickler: a crafted or corrupt
    one raises CorruptCheckpoint (an OSError stays one: the file could not be read). A reader reads
    it once: dcp.load plans from the metadata that was checked, not from a file replaced since."""

    checked = None

    def read_metadata(self, *args, **kwargs):
        if self.checked is not None:
            return self.checked
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as metadata_file:
            try:
                metadata = MetadataUnpickler(metadata_file).load()
                if not isinstance(metadata, Metadata):
                    raise TypeError(f"a {type(metadata).__name__}, not DCP's Metadata")
                for info in metadata.storage_data.values():  # read from self.path / relative_path
                    if not is_shard_name(info.relative_path):
                        raise ValueError(f"its shard file {info.relative_path} is not a file name in the checkpoint directory")
                    for field in ("offset", "length"):  # where in that file: check_shards adds them up
                        value = getattr(info, field)
                        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                            raise ValueError(f"its shard file {info.relative_path} has the {field} {value!r}, not a whole "
                                             "number >= 0")
                # as FileSystemReader.read_metadata does
                if metadata.storage_meta is None:
                    metadata.storage_meta = StorageMeta()
                metadata.storage_meta.load_id = self.load_id
            except (OSError, MemoryError):
                raise
            except Exception as e:  # the bytes, or what the allowed types make of them: not DCP metadata
                raise CorruptCheckpoint(f"{self.path} has a corrupt {Path(path).name} ({type(e).__name__}: {shown(e)})") from e
        self.checked = metadata
        return metadata


class WeightsOnlyLoadPlanner(DefaultLoadPlanner):
    """torch's DefaultLoadPlanner, whose non-tensor values (stored in the shards as torch.save
    pickles) load with weights_only=True: one that would call a function or build an object
    raises CorruptCheckpoint instead (torch's loads them with weights_only=False)."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def load_bytes(self, read_item, value):
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, weights_only=True)
        except Exception as e:
            if not is_corruption(e):
                raise
            raise CorruptCheckpoint(f"{self.path}: its shard value {fqn} {refusal(e)}") from e
        # as DefaultLoadPlanner.load_bytes does with what it loads
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


def check_own_file(path, name):
    """Raise CorruptCheckpoint where the file name of the sharded checkpoint at path is there but is
    not a regular file: a symbolic link (its bytes would come from wherever it points), a FIFO (a
    read that never ends), a directory. A missing one is left to the caller to report."""
    try:
        mode = os.lstat(Path(path) / name).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        raise CorruptCheckpoint(f"{path}: {name} is {kind}; a checkpoint's files are its own")


def check_shards(path):
    """Raise CorruptCheckpoint unless the sharded checkpoint at path has its metadata and
    every byte its metadata points to, each of its files its own (a shard cut short, missing, or
    a link to another file fails here rather than halfway through loading on every rank)."""
    for name in (".metadata", TRAINER_STATE):
        check_own_file(path, name)
    try:
        metadata = MetadataReader(str(path)).read_metadata()
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.EINVAL):
            raise CorruptCheckpoint(f"{path} has no readable .metadata ({type(e).__name__}: {e})") from e
        raise
    needed = {}
    for info in metadata.storage_data.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        check_own_file(path, name)
        shard = Path(path) / name
        if not shard.is_file() or shard.stat().st_size < size:
            have = shard.stat().st_size if shard.is_file() else "no"
            raise CorruptCheckpoint(f"{path}: shard {name} has {have} bytes of {size}")


def load_checkpoint(path):
    """The checkpoint at path, on the CPU; raises CorruptCheckpoint if it is not a checkpoint.

    Of a sharded checkpoint only its trainer state is read (after its shards are checked):
    the model and optimizer state are in its shards, which load_sharded reads.
    """
    path = Path(path)
    sharded = is_sharded(path)
    if sharded:
        check_shards(path)
    state = read_state(path / TRAINER_STATE if sharded else path)
    required = [k for k in REQUIRED_KEYS if not (sharded and k in SHARDED_KEYS)]
    if not isinstance(state, dict) or any(key not in state for key in required):
        raise CorruptCheckpoint(f"{path} is not a trainer checkpoint")
    if state["format"] != FORMAT:
        raise CheckpointError(f"{path} has format {state['format']}, this trainer reads format {FORMAT}")
    if not sharded:
        state["model"] = strip_wrapper_prefixes(state["model"])
    return state


def load_sharded(tensors, path, no_dist=False):
    """Fill tensors (get_state_dict's model and optimizer state: DTensor shards, or whole
    tensors of a plain model) from the sharded checkpoint at path, in place, its metadata and
    non-tensor values read strictly. Every rank of a job calls it; without a process group (or
    with no_dist) it reads in this process alone. What dcp.load refuses it reports as a
    CheckpointException (a BaseException, with the error of each rank that failed): raised here
    as CorruptCheckpoint with the first failed rank's reason."""
    reader = MetadataReader(str(path))
    # a refused .metadata raises here, as itself: inside dcp.load, torch logs its traceback and then
    # fails with an error of its own
    reader.read_metadata()
    try:
        dcp.load(tensors, storage_reader=reader, planner=WeightsOnlyLoadPlanner(path), no_dist=no_dist)
    except CheckpointException as e:
        error, _trace = e.failures[min(e.failures)]
        if isinstance(error, CorruptCheckpoint):  # the planner's: its message names the checkpoint, shown
            raise CorruptCheckpoint(str(error)) from e
        raise CorruptCheckpoint(f"{path} does not load ({type(error).__name__}: {shown(error)})") from e


def load_sharded_model(path, model):
    """Load the model weights of the sharded checkpoint at path into a plain model, in this
    process alone (no process group, no conversion step)."""
    weights = {"model": model.state_dict()}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        load_sharded(weights, path, no_dist=True)
    model.load_state_dict(weights["model"])


def load_latest(ckpt_dir, move_aside=False):
    """(path, state) of the newest checkpoint that loads, or (None, None) when there is none.

    A corrupt checkpoint (truncated, garbled) is skipped with a warning in favour of the one
    before it, and with move_aside renamed to *.bad, out of the listing and of keep-K; if none
    loads that is an error, not a fresh start. Any other error (a read error that persists,
    no memory) is raised: the newer checkpoints may well be fine.
    """
    ckpt_dir = Path(ckpt_dir)
    candidates = list_checkpoints(ckpt_dir)
    moved_before = list(ckpt_dir.glob(f"step_*{BAD_SUFFIX}")) if ckpt_dir.is_dir() else []
    for _step, path in reversed(candidates):
        try:
            return path, load_checkpoint(path)
        except CorruptCheckpoint as e:
            aside = ""
            if move_aside:
                path.rename(path.with_name(path.name + BAD_SUFFIX))
                aside = f"; moved to {path.name}{BAD_SUFFIX}"
            print(f"warning: checkpoint {e}{aside}; trying the previous one", file=sys.stderr, flush=True)
    if candidates or moved_before:
        raise CheckpointError(f"none of the {len(candidates) + len(moved_before)} checkpoints in {ckpt_dir} loads; "
                              "move them away to start the run from scratch")
    return None, None


def find_checkpoint(path):
    """(path, state) for a checkpoint file, a checkpoints directory, or a run directory."""
    path = Path(path)
    if path.is_file() or (path.is_dir() and NAME.match(path.name)):
        return path, load_checkpoint(path)
    if not path.is_dir():
        raise CheckpointError(f"--checkpoint {path}: no such file or directory")
    ckpt_dir = path / CHECKPOINT_DIR if (path / CHECKPOINT_DIR).is_dir() else path
    found, state = load_latest(ckpt_dir)
    if found is None:
        raise CheckpointError(f"--checkpoint {path}: no checkpoints (step_*.pt, step_*/) in {ckpt_dir}")
    return found, state


def clean_checkpoint_dir(ckpt_dir):
    """Remove partial checkpoints left by a process killed while writing one."""
    if Path(ckpt_dir).is_dir():
        for name in remove_temp_files(ckpt_dir):
            print(f"removed partial checkpoint {name}", file=sys.stderr, flush=True)


def check_resumable(state, model_cfg, tokenizer, data_dir, out_dir):
    """Raise ConfigError when the checkpoint's model is not the one the config and data ask for."""
    shape = {k: v for k, v in asdict(model_cfg).items() if k != "dropout"}
    # (checkpoints from before --bias existed have biases)
    saved_shape = {k: state["model_config"].get(k, True if k == "bias" else None) for k in shape}
    if saved_shape["vocab_size"] != shape["vocab_size"]:
        saved_tokenizer = (state.get("tokenizer") or {"kind": "bytes", "vocab_size": 256})
        raise ConfigError(f"the checkpoints in {out_dir / CHECKPOINT_DIR} were trained on tokens of another "
                          f"tokenizer ({saved_tokenizer['kind']}, {saved_tokenizer['vocab_size']} tokens) than "
                          f"--data {data_dir} holds ({tokenizer['kind']}, {tokenizer['vocab_size']} "
                          "tokens): prepare the data as before, or train into another --out")
    if saved_shape != shape:
        raise ConfigError(f"the checkpoints in {out_dir / CHECKPOINT_DIR} are of a model {saved_shape}, the "
                          f"config asks for {shape}; use the same model flags or another --out")
