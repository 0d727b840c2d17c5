# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A sweep: many runs from one inventory. The `sweep` variable names it and gives a `grid` (every
combination of its values) and/or a `list` of member settings, over any run variable: a nested key
where a variable is a dict (pretrain_model.n_layer), a flag of your script where it is a script's
arguments (pretrain_script_args.--lr). Each member is a full run, named from its values, never from its
position: adding values keeps the names of the members there were. What is wrong with a sweep is
said before anything is made, each message naming the member or the key and the fix."""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import argument_specs
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.run import RUN_NAME

# the variables whose values are a script's arguments: a key below them is one of its flags
SCRIPT_ARGS = ("pretrain_script_args", "inference_script_args")
# what a member may not set: its name is the sweep's, and the sweep is not swept
NOT_SWEPT = ("run_name", "sweep")
# what a member of the list may say besides run variables: its parameter count, for the scaling law
# of a script whose records do not say it (it is no setting, and not in the member's name)
PARAMS = "sweep_params"
# a member's name: the sweep's, a dash, then its values (at most 64 characters in all, as run_name)
NAME_MAX = 64
LABEL = re.compile(r"[^A-Za-z0-9._-]")


def _json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _label(key, value):
    """A key and its value in a member's name (pretrain_learning_rate, 0.0003 -> learning_rate0.0003),
    None where either holds a character a run name cannot."""
    last = key.split(".")[-1].lstrip("-")
    if any(last.startswith(role + "_") for role in argument_specs.specs()):
        last = last[len(argument_specs.role_of(last)) + 1:] or last
    label = last + (value if isinstance(value, str) else _json(value))
    return None if LABEL.search(label) else label


def member_name(sweep_name, values):
    """The member's run name: the sweep's name and its values in key order, or, where that would be
    too long or not a run name, the sweep's name and a digest of its values. It depends on the
    member's own values alone: adding members renames none."""
    labels = [_label(key, values[key]) for key in sorted(values)]
    name = "-".join([sweep_name] + [label or "" for label in labels])
    if None not in labels and len(name) <= NAME_MAX and RUN_NAME.fullmatch(name):
        return name
    return digest_name(sweep_name, values)


def digest_name(sweep_name, values):
    """The sweep's name and 10 hex digits of a digest of the member's values."""
    return "%s-%s" % (sweep_name[:NAME_MAX - 11], hashlib.sha1(_json(values).encode()).hexdigest()[:10])


def _script_args(args, flag, value):
    """args with flag set to value: --flag=value replacing the flag where args has it (as one word
    or as --flag value), else added at the end."""
    out, skip = [], False
    for index, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = index + 1 < len(args) and not str(args[index + 1]).startswith("-")
            continue
        if str(arg).startswith(flag + "="):
            continue
        out.append(arg)
    return out + ["%s=%s" % (flag, value if isinstance(value, str) else _json(value))]


def _apply(settings, key, value, base):
    """settings (variable -> value) with key set to value; the reason it cannot be, else None."""
    top, _dot, rest = key.partition(".")
    current = settings[top] if top in settings else base.get(top)
    if not rest:
        settings[top] = value
        return None
    if top in SCRIPT_ARGS:
        if not rest.startswith("-") or "=" in rest or not isinstance(current or [], list):
            return ("%s: below %s give your script's flag as it takes it, such as %s.--lr"
                    % (key, top, top))
        settings[top] = _script_args(list(current or []), rest, value)
        return None
    if not isinstance(current, dict):
        return ("%s: %s is not a dict (it is %s), so it has no key %s: sweep %s itself"
                % (key, top, type(current).__name__ if current is not None else "unset", rest, top))
    merged = json.loads(_json(current))
    where = merged
    parts = rest.split(".")
    for part in parts[:-1]:
        if not isinstance(where.get(part, {}), dict):
            return "%s: %s is no dict in %s" % (key, part, top)
        where = where.setdefault(part, {})
    where[parts[-1]] = value
    settings[top] = merged
    return None


def members(sweep, known, base=None):
    """sweep: the sweep variable; known: the names of the collection's variables; base: the run's
    variables as the inventory sets them (for nested keys and script flags) ->
    ([{name, values, settings}], [message]). values: the member's keys and values as the sweep gives
    them; settings: the run variables it sets (whole values, merged into the inventory's); params: its
    parameter count where its list entry gives sweep_params."""
    base = base or {}
    if not isinstance(sweep, dict):
        return [], ["sweep must be a dict with a name and a grid or a list, such as {name: lr, grid: "
                    "{pretrain_learning_rate: [3e-4, 6e-4]}}"]
    errors = []
    unknown = sorted(set(sweep) - {"name", "grid", "list"})
    if unknown:
        errors.append("sweep has %s, which it does not take: give name, grid and list" % ", ".join(unknown))
    name = sweep.get("name")
    if not isinstance(name, str) or not RUN_NAME.fullmatch(name) or len(name) > NAME_MAX - 11:
        errors.append("sweep.name=%r must be 1-%d letters, digits, . _ - starting with a letter or digit "
                      "(it begins every member's run name)" % (name, NAME_MAX - 11))
    grid, listed = sweep.get("grid") or {}, sweep.get("list") or []
    if not isinstance(grid, dict) or not isinstance(listed, list):
        return [], errors + ["sweep.grid must be a dict (key -> list of values) and sweep.list a list of dicts"]
    if not grid and not listed:
        errors.append("sweep has no member: give a grid (key -> list of values) or a list of member settings")
    if PARAMS in grid:
        errors.append("sweep.grid.%s: give a member's parameter count in sweep.list, beside the values that make its "
                      "size, such as {pretrain_script_args.--n_embd: 64, %s: 210000}" % (PARAMS, PARAMS))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            errors.append("sweep.grid.%s must be a non-empty list of values, such as [3e-4, 6e-4]" % key)
    candidates = []
    if grid and all(isinstance(v, list) and v for v in grid.values()):
        keys = list(grid)
        candidates += [("sweep.grid", dict(zip(keys, combo))) for combo in itertools.product(*(grid[k] for k in keys))]
    for index, entry in enumerate(listed):
        if not isinstance(entry, dict) or not entry:
            errors.append("sweep.list[%d] must be a dict of the member's settings, such as {pretrain_learning_rate: 1e-3}"
                          % index)
            continue
        candidates.append(("sweep.list[%d]" % index, dict(entry)))
    params = {}
    for where, values in candidates:
        if PARAMS in values:
            count = values.pop(PARAMS)
            if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
                errors.append("%s.%s=%r must be the member's parameter count, a positive integer such as 124000000"
                              % (where, PARAMS, count))
            params[where] = count
            if not values:
                errors.append("%s has %s alone: give the settings that make the member too" % (where, PARAMS))
    keys = sorted(set(key for _where, values in candidates for key in values))
    for key in keys:
        top = key.split(".")[0]
        if top in NOT_SWEPT:
            errors.append("sweep: %s cannot be swept (each member's run name is the sweep's name and its values)" % key)
        elif top not in known:
            close = difflib.get_close_matches(top, list(known), n=1, cutoff=0.8)
            errors.append("sweep: %s is not a variable of llmtrain.slurm%s" % (
                top, ": did you mean %s?" % close[0] if close else ": remove it, or give a run variable"))
    if errors:
        return [], errors
    out, seen = [], {}
    for where, values in candidates:
        settings = {}
        for key in sorted(values):
            why = _apply(settings, key, values[key], base)
            if why:
                errors.append("%s: %s" % (where, why))
        same = seen.get(_json(values))
        if same:
            errors.append("%s is the same member as %s: give each member once" % (where, same))
            continue
        seen[_json(values)] = where
        out.append(dict(name=member_name(name, values), values=values, settings=settings))
        if where in params:
            out[-1]["params"] = params[where]
    # values that read the same in a name (0.1 and "0.1"): refused rather than named by position
    named = {}
    for member in out:
        if member["name"] in named:
            errors.append("%s and %s would both be run %s: give the values once, as numbers or as strings"
                          % (seen[_json(named[member["name"]])], seen[_json(member["values"])], member["name"]))
        named[member["name"]] = member["values"]
    return (out, []) if not errors else ([], errors)
