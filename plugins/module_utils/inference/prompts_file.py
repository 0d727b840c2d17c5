# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The check of inference_prompts_file, the batch's prompts (JSON lines on the controller), done
before anything is copied or submitted: every message names the variable, the line and the fix.
The batch job (trainer.batch) reads the same format."""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import untrusted

VARIABLE = "inference_prompts_file"
# every rank of the batch job reads the whole file: larger batches are split into several files
MAX_BYTES = 64 * 1024 * 1024
# messages about single lines: the first ones, then how many more lines are bad
MAX_MESSAGES = 10
SETTINGS = ("max_new_tokens", "temperature", "top_k", "seed")
KEYS = ("prompt", "id") + SETTINGS
MAX_SEED = untrusted.MAX_INT
EXAMPLE = '{"prompt": "def fib(n):", "max_new_tokens": 64, "temperature": 0.7, "id": "fib"}'
# The temperatures the reference trainer's sampling takes (its trainer/model.py keeps the same bounds):
# outside them every probability it samples from is NaN, which the job would find only once it runs.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-4, 1e4
TEMPERATURES = "0 (the most likely token) or from %g to %g" % (MIN_TEMPERATURE, MAX_TEMPERATURE)


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def temperature_ok(value):
    """Whether the number value (a float or an int) is one of TEMPERATURES; NaN is not."""
    return value == 0 or MIN_TEMPERATURE <= value <= MAX_TEMPERATURE


def _shown(value):
    """A value of the file as JSON, cut short: a message never repeats a long prompt."""
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


def _unknown(key):
    close = difflib.get_close_matches(key, KEYS, n=1)
    return "%s (%s)" % (_shown(key), "did you mean %s?" % close[0] if close else "not a key of a prompt")


def line_errors(item):
    """What is wrong with one line's JSON value -> [text, ...] (each saying the fix)."""
    if not isinstance(item, dict):
        kind = "string" if isinstance(item, str) else "array" if isinstance(item, list) else _shown(item)
        return ["it is a JSON %s, not an object such as %s" % (kind, EXAMPLE)]
    found = []
    if "prompt" not in item:
        found.append('it has no "prompt": give the text to complete as "prompt"')
    elif not isinstance(item["prompt"], str):
        found.append('"prompt" is %s, not a string: give the text to complete in quotes' % _shown(item["prompt"]))
    unknown = sorted(set(item) - set(KEYS))
    if unknown:
        found.append("unknown key %s: a prompt's keys are %s" % (", ".join(_unknown(k) for k in unknown), ", ".join(KEYS)))
    if "max_new_tokens" in item and not (_whole(item["max_new_tokens"]) and item["max_new_tokens"] >= 1):
        found.append('"max_new_tokens" is %s: give a whole number >= 1 (inference_max_new_tokens caps it)' % _shown(item["max_new_tokens"]))
    if "temperature" in item and not (_number(item["temperature"]) and temperature_ok(item["temperature"])):
        found.append('"temperature" is %s: give %s' % (_shown(item["temperature"]), TEMPERATURES))
    if "top_k" in item and not (_whole(item["top_k"]) and item["top_k"] >= 0):
        found.append('"top_k" is %s: give a whole number >= 0 (0 samples from all tokens)' % _shown(item["top_k"]))
    if "seed" in item and not (_whole(item["seed"]) and 0 <= item["seed"] <= MAX_SEED):
        found.append('"seed" is %s: give a whole number from 0 to %d' % (_shown(item["seed"]), MAX_SEED))
    if "id" in item and not (isinstance(item["id"], str) or _whole(item["id"])):
        found.append('"id" is %s: give a string or a whole number' % _shown(item["id"]))
    return found


def check_lines(data, name):
    """data: the file's bytes -> (prompts, [message])."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the last line's end
    found, bad = [], 0
    for number, line in enumerate(lines, 1):
        problems = []
        if not line.strip():
            problems = ["it is empty: remove it (each line is one prompt; an empty prompt is {\"prompt\": \"\"})"]
        else:
            try:
                # bounded: a line nested deeper than any prompt, or with an integer beyond 64 bits, is
                # refused, not parsed into a RecursionError; NaN and the infinities are judged as values
                problems = line_errors(untrusted.loads(line.decode("utf-8"), MAX_BYTES, nonfinite=True))
            except UnicodeDecodeError as e:
                problems = ["it is not UTF-8 (byte %d): save the file as UTF-8" % (e.start + 1)]
            except untrusted.Unreadable as e:
                problems = ["%s: write one JSON object per line, such as %s" % (e, EXAMPLE)]
        if problems:
            bad += 1
            if bad <= MAX_MESSAGES:
                found.append("%s=%s line %d: %s." % (VARIABLE, name, number, "; ".join(problems)))
    if bad > MAX_MESSAGES:
        found.append("%s=%s: %d more lines are wrong (%d in all)." % (VARIABLE, name, bad - MAX_MESSAGES, bad))
    if not lines:
        found.append("%s=%s holds no prompt: give one JSON object per line, such as %s." % (VARIABLE, name, EXAMPLE))
    return len(lines), found


def check_file(path, base=None):
    """path: inference_prompts_file (relative: to base, the directory ansible-playbook runs in) ->
    {path (absolute), prompts, bytes, sha256, errors}."""
    result = {"path": None, "prompts": 0, "bytes": 0, "sha256": None, "errors": []}
    if not isinstance(path, str) or not path.strip() or "\n" in path or "\0" in path:
        result["errors"].append("%s=%r must be the path of a file of prompts on this machine (JSON lines, one such as "
                                "%s each), or null." % (VARIABLE, path, EXAMPLE))
        return result
    full = os.path.abspath(os.path.join(base or os.getcwd(), os.path.expanduser(path)))
    result["path"] = full
    try:
        if os.path.exists(full) and not os.path.isfile(full):  # a directory; a FIFO would block the read
            raise IOError("not a regular file")
        with open(full, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except (IOError, OSError) as e:
        result["errors"].append("%s=%s cannot be read (%s): give the path of a file of prompts on the machine that "
                                "runs ansible-playbook (a relative one from the directory it runs in)."
                                % (VARIABLE, path, getattr(e, "strerror", None) or e))
        return result
    if len(data) > MAX_BYTES:
        result["errors"].append("%s=%s is larger than %d MiB, the most a batch holds (every rank of the job reads it): "
                                "split it into several files and run a batch for each." % (VARIABLE, path, MAX_BYTES // 1048576))
        return result
    result["bytes"] = len(data)
    result["sha256"] = hashlib.sha256(data).hexdigest()
    result["prompts"], result["errors"] = check_lines(data, path)
    return result
