# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NCCL / UCX / Gloo environment: inventory variables -> validated environment.

One place for the syntax rules, used by the preflight checks and by the nccl_env role,
so a value is judged the same way before submission and when the env file is written.
Every error names the inventory variable, the bad value and a fix.
"""

from __future__ import annotations

import re

from .untrusted import digits

# inventory variable suffix (after "nccl_env_") -> environment variable
VARIABLES = {
    "socket_ifname": "NCCL_SOCKET_IFNAME",
    "ib_hca": "NCCL_IB_HCA",
    "ib_disable": "NCCL_IB_DISABLE",
    "debug": "NCCL_DEBUG",
    "debug_subsys": "NCCL_DEBUG_SUBSYS",
    "net_gdr_level": "NCCL_NET_GDR_LEVEL",
    "cross_nic": "NCCL_CROSS_NIC",
    "async_error_handling": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "ucx_net_devices": "UCX_NET_DEVICES",
    "ucx_tls": "UCX_TLS",
    "gloo_socket_ifname": "GLOO_SOCKET_IFNAME",
}
PREFIX = "nccl_env_"

DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE", "ABORT")
DEBUG_SUBSYSTEMS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL",
                    "PROXY", "NVLS", "BOOTSTRAP", "REG", "PROFILE", "RAS", "ALL")
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
UCX_TRANSPORTS = ("all", "sm", "shm", "self", "tcp", "rc", "rc_v", "rc_x", "rc_mlx5", "ud", "ud_v",
                  "ud_x", "ud_mlx5", "dc", "dc_x", "dc_mlx5", "ib", "mm", "posix", "sysv", "xpmem",
                  "cma", "knem", "cuda", "cuda_copy", "cuda_ipc", "gdr_copy", "rocm", "rocm_copy",
                  "rocm_ipc", "srd")
IFNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")
HCA = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]+)?$")
UCX_DEVICE = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]+)?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_name_errors(names, what):
    """One message per name that cannot be an environment variable name; `what` says whose
    names they are, such as "slurm_secret_env key"."""
    return ["%s %r is not an environment variable name (letters, digits and _, not starting with a digit)."
            % (what, name) for name in names if not ENV_NAME.match(str(name))]


def _strip_nccl_prefixes(value):
    """NCCL list syntax: an optional leading ^ (exclude) then = (exact match)."""
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    return (value[1:] if exact else value), exclude, exact


def _named(bad):
    """The bad items of a list, for a message."""
    return ", ".join(repr(b) for b in bad) or "empty list"


def _check_ifname_list(value, allow_prefixes):
    items = value
    if allow_prefixes:
        items, _exclude, _exact = _strip_nccl_prefixes(value)
    bad = [item for item in items.split(",") if not IFNAME.match(item)]
    if bad or not items:
        prefixes = " (optionally led by ^ to exclude and/or = for exact names)" if allow_prefixes else ""
        return ("interface names are 1-15 characters of letters, digits and _.@- separated by commas%s;"
                " bad: %s" % (prefixes, _named(bad)))
    return None


def check(env_name, value):
    """Why value is wrong for env_name, or None. Values are strings."""
    if env_name in ("NCCL_SOCKET_IFNAME",):
        return _check_ifname_list(value, True)
    if env_name == "GLOO_SOCKET_IFNAME":
        return _check_ifname_list(value, False)
    if env_name == "NCCL_IB_HCA":
        items, _exclude, _exact = _strip_nccl_prefixes(value)
        bad = [item for item in items.split(",") if not HCA.match(item)]
        if bad or not items:
            return ("HCAs are device names with an optional :port (e.g. mlx5_0:1,mlx5_1:1), optionally"
                    " led by ^ and/or =; bad: %s" % _named(bad))
        return None
    if env_name == "NCCL_IB_DISABLE":
        return None if value in ("0", "1") else "must be 0 (use InfiniBand) or 1 (disable it)"
    if env_name == "NCCL_DEBUG":
        return None if value.upper() in DEBUG_LEVELS else "must be one of %s" % ", ".join(DEBUG_LEVELS)
    if env_name == "NCCL_DEBUG_SUBSYS":
        items = value[1:] if value.startswith("^") else value
        bad = [item for item in items.split(",") if item.upper() not in DEBUG_SUBSYSTEMS]
        if bad or not items:
            return ("must be a comma list (optionally led by ^) of %s; bad: %s"
                    % (", ".join(DEBUG_SUBSYSTEMS), _named(bad)))
        return None
    if env_name == "NCCL_NET_GDR_LEVEL":
        ok = value.upper() in GDR_LEVELS or (digits(value) and int(value) <= 5)
        return None if ok else "must be one of %s or a number 0-5" % ", ".join(GDR_LEVELS)
    if env_name == "NCCL_CROSS_NIC":
        return None if value in ("0", "1", "2") else "must be 0, 1 or 2"
    if env_name == "TORCH_NCCL_ASYNC_ERROR_HANDLING":
        return None if value in ("0", "1", "2", "3") else "must be 0, 1, 2 or 3"
    if env_name == "UCX_NET_DEVICES":
        bad = [item for item in value.split(",") if not UCX_DEVICE.match(item)]
        return ("must be 'all' or a comma list of devices with an optional :port (e.g. mlx5_0:1,mlx5_1:1);"
                " bad: %s" % _named(bad)) if bad or not value else None
    if env_name == "UCX_TLS":
        items = value[1:] if value.startswith("^") else value
        bad = [item for item in items.split(",") if item.lower() not in UCX_TRANSPORTS]
        return ("must be a comma list (optionally led by ^) of UCX transports such as rc,ud,sm,self,tcp,"
                "cuda_copy,cuda_ipc,gdr_copy; bad: %s" % _named(bad)) if bad or not items else None
    return None


def _as_text(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value).strip()


def build_env(settings):
    """Inventory settings (nccl_env_* names, with or without the prefix) -> (env, errors).

    Unset or empty values are left out (NCCL's defaults apply; debugging stays off unless
    asked). GLOO_SOCKET_IFNAME defaults to the NCCL interface when that names interfaces
    plainly. `extra` (a dict) adds any other variables, names checked, values kept as given.
    """
    values = {}
    for key, value in settings.items():
        name = key[len(PREFIX):] if key.startswith(PREFIX) else key
        values[name] = value
    env, errors = {}, []
    for name, env_name in VARIABLES.items():
        value = values.get(name)
        if value is None or _as_text(value) == "":
            continue
        text = _as_text(value)
        problem = check(env_name, text)
        if problem:
            errors.append("%s%s=%r is not a valid %s: %s." % (PREFIX, name, value, env_name, problem))
        else:
            env[env_name] = text.upper() if env_name == "NCCL_DEBUG" else text
    if "GLOO_SOCKET_IFNAME" not in env and "NCCL_SOCKET_IFNAME" in env:
        plain, exclude, _exact = _strip_nccl_prefixes(env["NCCL_SOCKET_IFNAME"])
        if not exclude:
            env["GLOO_SOCKET_IFNAME"] = plain
    extra = values.get("extra") or {}
    if not isinstance(extra, dict):
        errors.append("%sextra must be a mapping of environment variable names to values, got %r."
                      % (PREFIX, extra))
        extra = {}
    for key, value in extra.items():
        name_errors = env_name_errors([key], PREFIX + "extra key")
        if name_errors:
            errors.extend(name_errors)
        elif value is None:
            continue
        else:
            problem = check(str(key), _as_text(value))
            if problem:
                errors.append("%sextra.%s=%r: %s." % (PREFIX, key, value, problem))
            else:
                env[str(key)] = _as_text(value)
    return env, errors


def interfaces(env):
    """The interfaces an environment tells NCCL and Gloo to use, as what must exist on a node:
    [dict(name, exact, variable)]. NCCL takes prefixes unless the list starts with =; Gloo
    takes exact names. Exclusion lists (^...) name nothing that must exist."""
    wanted = []
    for env_name, variable in (("NCCL_SOCKET_IFNAME", PREFIX + "socket_ifname"),
                               ("GLOO_SOCKET_IFNAME", PREFIX + "gloo_socket_ifname")):
        value = env.get(env_name)
        if not value:
            continue
        items, exclude, exact = _strip_nccl_prefixes(value) if env_name.startswith("NCCL") else (value, False, True)
        if exclude:
            continue
        for item in items.split(","):
            if not any(w["name"] == item and w["exact"] == exact for w in wanted):
                wanted.append(dict(name=item, exact=exact, variable=variable))
    return wanted
