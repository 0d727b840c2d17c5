# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU faults the node check sees before a job trains on a node, each from what the node's own
tools print (recorded outputs in tests/unit/fixtures/nvidia_smi, with where they come from):

    nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE    one call for all the GPUs
    dmesg                                                             the kernel's "NVRM: Xid" lines
    dcgmi diag -r N                                                   run_gpu_diag N > 0, where DCGM is

A GPU is faulty when, since the driver loaded, it counted uncorrectable ECC errors, has a page
retirement, a row remapping or a memory repair pending (it needs a reset), failed a remapping or
holds memory it cannot repair (it needs replacing), or has its clocks held down by the hardware
or by its temperature while idle (HW Slowdown, HW Thermal Slowdown, HW Power Brake Slowdown, SW
Thermal Slowdown); a node is faulty when its kernel log holds an Xid that asks for a reset, a
reboot or the GPU's replacement (XID_ACTIONS), or DCGM's diagnostic fails. Findings that are no
fault (correctable errors, other Xids, a kernel log the user cannot read) are notes.

It imports nothing from Ansible: it runs on the nodes as part of the llmtrain_node package.
"""

from __future__ import annotations

import re

QUERY = ["-q", "-d", "ECC,PAGE_RETIREMENT,ROW_REMAPPER,PERFORMANCE"]
# "Clocks Event Reasons" since driver 535; "Clocks Throttle Reasons" before (keys compared in
# lower case: older drivers print "Retired pages")
EVENT_SECTIONS = ("clocks event reasons", "clocks throttle reasons")
SLOWDOWNS = ("hw slowdown", "hw thermal slowdown", "hw power brake slowdown", "sw thermal slowdown")
RESET = "reset the GPU (nvidia-smi -r, with nothing running on it) or reboot the node"
REBOOT = "reboot the node"
REPLACE = "the GPU needs replacing: drain the node"
SLOWED = "its clocks are held down while idle: check its cooling and power, or drain the node"
_LINE = re.compile(r"^(?P<key>\S.*?)\s+:\s?(?P<value>.*)$")
_XID = re.compile(r"NVRM: Xid \((?P<device>[^)]*)\): (?P<code>[0-9]+)(?:, (?P<text>.*))?")
# the driver's load: Xids before the last one were before a reload (or a reboot) of the driver
_DRIVER_LOAD = re.compile(r"NVRM: loading NVIDIA UNIX")
# Xids after which the GPU is unfit until it is reset, the node rebooted or the GPU replaced:
# those whose immediate action in NVIDIA's Xid catalog is RESET_GPU or RESTART_BM, or a workflow
# that ends in one (48 a double bit error, 74 NVLink, 144-150 NVLink5). Others are notes: an
# application's own fault (13, 31, 43, 45, 69), a remapping done (63), a contained error (94).
# tests/unit/fixtures/gpu_health/SOURCES.md names the catalog.
XID_ACTIONS = dict(
    [(code, RESET) for code in (46, 48, 62, 64, 74, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158)]
    + [(code, RESET) for code in range(144, 151)] + [(79, "the GPU fell off the bus: " + REBOOT)])
XID_NAMES = {46: "GPU stopped processing", 48: "double bit ECC error", 62: "internal micro-controller halt",
             64: "memory remapping failure", 74: "NVLink error", 79: "GPU has fallen off the bus",
             95: "uncontained memory error", 109: "context switch timeout", 110: "security fault",
             119: "GSP RPC timeout", 120: "GSP error", 136: "link training failed", 140: "unrecovered ECC error",
             143: "GPU initialization error", 155: "NVLink link down", 156: "resource retirement event",
             158: "GPU fatal timeout"}
DIAG_TIMEOUT_S = 300
DIAG_LEVELS = (0, 1, 2, 3, 4)
SAID_CHARS = 300
DIAG_WIDTH = 45  # dcgmi diag's Result column


def parse_query(text):
    """`nvidia-smi -q [-d ...]` -> [(bus id, {(section, ..., key): value})], one per GPU in the
    order printed (the order of the GPUs' indices); keys in lower case. A key can have a value
    and keys below it (HW Slowdown: its thermal and power brake kinds)."""
    gpus, values, stack = [], None, []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        stripped = line.strip()
        if indent == 0:
            if stripped.startswith("GPU ") and _LINE.match(stripped) is None:
                values, stack = {}, []
                gpus.append((stripped[4:].strip(), values))
            else:
                values = None  # the log's header: timestamp, driver, attached GPUs
            continue
        if values is None:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        match = _LINE.match(stripped)
        key = (match.group("key") if match else stripped).lower()
        if match:
            values[tuple(name for _indent, name in stack) + (key,)] = match.group("value").strip()
        stack.append((indent, key))
    return gpus


def _count(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def gpu_findings(values):
    """(faults, notes) of one GPU's values (parse_query), each a short sentence."""
    faults, notes = [], []
    volatile = [(path[2:], value) for path, value in values.items()
                if len(path) >= 3 and path[:2] == ("ecc errors", "volatile")]
    # since Ampere: SRAM/DRAM Uncorrectable[ Parity|SEC-DED]; before: Double Bit > Total
    uncorrectable = dict((" ".join(key), _count(value)) for key, value in volatile
                         if ("uncorrectable" in key[0] or key == ("double bit", "total")) and _count(value) > 0)
    if uncorrectable:
        faults.append("%d uncorrectable ECC error(s) since the driver loaded (%s): %s" % (
            sum(uncorrectable.values()), ", ".join("%s %d" % item for item in sorted(uncorrectable.items())), RESET))
    for path, value in sorted(values.items()):
        if value.lower() != "yes":
            continue
        if path[0] == "retired pages" and path[-1].startswith("pending"):
            faults.append("a page retirement is pending (%s): %s" % (path[-1], RESET))
        elif path == ("remapped rows", "pending"):
            faults.append("a row remapping is pending: %s" % RESET)
        elif path == ("remapped rows", "remapping failure occurred"):
            faults.append("a row remapping failed: %s" % REPLACE)
        elif path[0] == "ecc errors" and path[-1].endswith("repair pending"):
            faults.append("%s: %s" % (path[-1], RESET))
        elif path[0] == "ecc errors" and path[-1] in ("unrepairable memory", "sram threshold exceeded"):
            faults.append("%s: %s" % (path[-1], REPLACE))
    slowed = sorted(set(path[-1] for path, value in values.items()
                        if path[0] in EVENT_SECTIONS and path[-1] in SLOWDOWNS and value.lower() == "active"))
    if slowed:
        faults.append("%s active: %s" % (", ".join(slowed), SLOWED))
    correctable = sum(_count(value) for key, value in volatile if "correctable" in key[0] and "uncorrectable" not in key[0])
    if correctable:
        notes.append("%d correctable ECC error(s) since the driver loaded" % correctable)
    return faults, notes


def parse_xids(text):
    """The kernel log's Xid lines since the driver last loaded -> {code: dict(count, devices,
    last)}: how often each code came, on which PCI devices, and its last line."""
    found = {}
    for line in text.splitlines():
        if _DRIVER_LOAD.search(line):
            found = {}
            continue
        match = _XID.search(line)
        if not match:
            continue
        entry = found.setdefault(int(match.group("code")), dict(count=0, devices=[], last=""))
        entry["count"] += 1
        if match.group("device") not in entry["devices"]:
            entry["devices"].append(match.group("device"))
        entry["last"] = line[match.start():][:SAID_CHARS]
    return found


def xid_findings(xids):
    """(faults, notes) of parse_xids()."""
    faults, notes = [], []
    for code, entry in sorted(xids.items()):
        said = "Xid %d%s x%d on %s since the driver loaded (last: %s)" % (
            code, " (%s)" % XID_NAMES[code] if code in XID_NAMES else "", entry["count"], ", ".join(entry["devices"]),
            entry["last"])
        if code in XID_ACTIONS:
            faults.append("%s: %s" % (said, XID_ACTIONS[code]))
        else:
            notes.append(said)
    return faults, notes


_STATUS = re.compile(r"^(Pass|Fail|Skip|Warn)\b")


def parse_diag(text):
    """`dcgmi diag -r N` (its table) -> [(name, [result, ...], text)]: each test or message row,
    its results ("Pass", "Fail - GPU: 0", ...: a test can have several) and the text of its
    message (rows named Warning, Error, Info), the table's wrapped lines joined."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|-----") or line.count("|") < 3:
            continue
        _empty, name, cell = line.split("|")[:3]
        # the column holds DIAG_WIDTH characters of the text a line, cut anywhere (in a word too)
        name, piece = name.strip(), cell[1:1 + DIAG_WIDTH]
        if name == "Diagnostic" and piece.strip() == "Result":
            continue
        if name:
            rows.append((name, [], ""))
            if _STATUS.match(piece) and name not in ("Warning", "Error", "Info"):
                rows[-1][1].append(piece.strip())
            else:
                rows[-1] = (name, [], piece)
        elif rows:
            name, results, said = rows[-1]
            if _STATUS.match(piece.strip()) and results:
                results.append(piece.strip())
            else:
                rows[-1] = (name, results, said + piece)
    return [(name, results, said.strip()) for name, results, said in rows]


def diag_findings(rows, level):
    """(faults, notes) of parse_diag(): a test that failed, with the warnings and errors after it;
    an Error row on its own; warnings after tests that passed are notes."""
    faults, notes, failed = [], [], None
    for name, results, said in rows:
        if results:
            bad = [result for result in results if result.startswith("Fail")]
            failed = "dcgmi diag -r %d: %s: %s" % (level, name, ", ".join(bad)) if bad else None
            if failed:
                faults.append(failed)
        elif name == "Error":
            faults.append("dcgmi diag -r %d: %s" % (level, said.strip()[:SAID_CHARS]))
        elif name == "Warning" and failed:
            faults[-1] += " (%s)" % said.strip()[:SAID_CHARS] if faults[-1] == failed else ""
        elif name == "Warning":
            notes.append("dcgmi diag -r %d: %s" % (level, said.strip()[:SAID_CHARS]))
    return faults, notes


def diag(dcgmi, runner, level):
    """(faults, notes) of `dcgmi diag -r level`; a node without DCGM, or whose DCGM does not
    answer, is noted."""
    if dcgmi is None:
        return [], ["run_gpu_diag=%d: no dcgmi on the node (DCGM is not installed): no diagnostic" % level]
    rc, out, err = runner([dcgmi, "diag", "-r", str(level)], timeout=DIAG_TIMEOUT_S)
    rows = parse_diag(out)
    if not any(results for _name, results, _said in rows):
        return [], ["dcgmi diag -r %d did not run (exit %d): %s" % (level, rc, (err or out).strip()[:SAID_CHARS])]
    return diag_findings(rows, level)


def per_gpu(gpus, kind):
    """Each finding once, with the GPUs that have it: "GPU 0 (bus): ..." for one, "GPUs 0, 1, 2
    (8 GPUs alike on a node say it once)"."""
    which = {}
    for gpu in gpus:
        for said in gpu[kind]:
            which.setdefault(said, []).append(gpu)
    return ["GPU %d (%s): %s" % (alike[0]["index"], alike[0]["bus"], said) if len(alike) == 1
            else "GPUs %s: %s" % (", ".join(str(gpu["index"]) for gpu in alike), said)
            for said, alike in which.items()]


def check(smi, runner, dmesg=None, dcgmi=None, diag_level=0):
    """This node's GPU health: dict(faults, notes) from nvidia-smi (path `smi`), the
    kernel log (`dmesg`, a path or None) and DCGM's diagnostic (`dcgmi`, where diag_level > 0)."""
    faults, notes, gpus = [], [], []
    rc, out, err = runner([smi] + QUERY)
    if rc != 0:
        faults.append("nvidia-smi %s failed (exit %d): %s" % (" ".join(QUERY), rc, (err or out).strip()[:SAID_CHARS]))
    else:
        for index, (bus, values) in enumerate(parse_query(out)):
            gpu_faults, gpu_notes = gpu_findings(values)
            gpus.append(dict(index=index, bus=bus, faults=gpu_faults, notes=gpu_notes))
        faults += per_gpu(gpus, "faults")
        notes += per_gpu(gpus, "notes")
    if dmesg is None:
        notes.append("no dmesg on the node: Xid errors not checked")
    else:
        rc, out, err = runner([dmesg], timeout=30)
        if rc != 0:
            notes.append("the kernel log is not readable here (dmesg: %s): Xid errors not checked"
                         % (err or out).strip()[:200])
        else:
            xid_faults, xid_notes = xid_findings(parse_xids(out))
            faults += xid_faults
            notes += xid_notes
    if diag_level > 0:
        diag_faults, diag_notes = diag(dcgmi, runner, diag_level)
        faults += diag_faults
        notes += diag_notes
    return dict(faults=faults, notes=notes)
