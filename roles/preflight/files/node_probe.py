"""Run on every compute node by the preflight role (one srun step): what the training job
will meet there. Prints one JSON line; never fails on what it finds.

    python node_probe.py TOKEN_PATH TOKEN INTERFACES_JSON
INTERFACES_JSON maps node names (and "*" for any node) to the interfaces NCCL/Gloo are
told to use: [{"name": ..., "exact": bool}], a prefix where exact is false (NCCL's rule).
Interfaces are read from the kernel for this process's network namespace
(if_nameindex), not from /sys/class/net, which shows the namespace /sys was mounted in.
"""

import json
import os
import socket
import sys
import tempfile


def main():
    token_path, token, interfaces = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    present = sorted(name for _index, name in socket.if_nameindex())
    wanted = interfaces.get(node, interfaces.get("*", []))
    missing = []
    for want in wanted:
        found = any(p == want["name"] if want["exact"] else p.startswith(want["name"]) for p in present)
        if not found and want["name"] not in missing:
            missing.append(want["name"])
    try:
        with open(token_path) as handle:
            token_visible = handle.read().strip() == token
    except OSError:
        token_visible = False
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=os.path.dirname(token_path))
        os.close(fd)
        os.unlink(probe)
        writable = True
    except OSError:
        writable = False
    try:
        import torch
        torch_info = dict(importable=True, version=torch.__version__)
    except Exception as exc:  # any import failure is a finding, not a crash
        torch_info = dict(importable=False, error="%s: %s" % (type(exc).__name__, exc))
    print(json.dumps(dict(node=node, python=sys.executable, python_version=sys.version.split()[0],
                          torch=torch_info, interfaces=present,
                          missing_interfaces=missing,
                          workspace_shared=token_visible, workspace_writable=writable)), flush=True)


if __name__ == "__main__":
    main()
