# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of the deploy_* variables (the deploy role's): the venv it may make and the tokenizer."""

from __future__ import annotations

import re

from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.common import count, one_line, strings

VENV_PYTHON = re.compile(r"^/.*[^/]/bin/python[0-9.]*$")


def errors(values):
    """values: the variables that are set -> [message] about the deploy_* among them (the venv is made
    before the nodes are probed, so its settings are checked with the rest)."""
    found = []
    for name, example in (("deploy_venv_packages", "[torch, numpy]"),
                          ("deploy_venv_pip_args", "[--index-url, https://download.pytorch.org/whl/cu124]")):
        if name in values:
            message = strings(values, name, example)
            if message:
                found.append(message)
    if "deploy_venv_base_python" in values and not one_line(values["deploy_venv_base_python"]):
        found.append("deploy_venv_base_python=%r must name the interpreter on the nodes that makes the venv, "
                     "such as python3 or /usr/bin/python3.11." % (values["deploy_venv_base_python"],))
    if "deploy_tokenizer" in values:
        tokenizer = values["deploy_tokenizer"]
        if not (tokenizer in ("bytes", "bpe") or (isinstance(tokenizer, str) and tokenizer.startswith("/")
                                                  and tokenizer.endswith(".json") and one_line(tokenizer))):
            found.append("deploy_tokenizer=%r must be bytes, bpe, or the absolute path of a tokenizer.json on the "
                         "cluster, such as /shared/tokenizers/gpt2/tokenizer.json." % (tokenizer,))
        elif tokenizer == "bpe":
            count(found, values, "deploy_vocab_size", 512, "tokens of the BPE to train (the 256 bytes, the merges "
                  "and <|endoftext|>)")
    if str(values.get("deploy_venv_create")).lower() in ("true", "yes", "on", "1"):
        python = values.get("slurm_python")
        # (a missing or empty slurm_python has its own message)
        if isinstance(python, str) and python.strip() and not (VENV_PYTHON.fullmatch(python) and "\n" not in python):
            found.append("deploy_venv_create=true makes the venv that slurm_python names, so slurm_python=%r must be "
                         "the venv's interpreter: an absolute path ending in bin/python, such as "
                         "/shared/venvs/llmtrain/bin/python." % (python,))
        if values.get("deploy_venv_packages") == []:
            found.append("deploy_venv_packages=[] installs nothing, but the trainer needs torch: list at least torch.")
    return found
