"""The collect step's metrics records of your script's event files (PyTorch Lightning 2.6.6's own file,
fixtures/trainers) carry the total: yours, else your script's arguments', else a Hugging Face Trainer's."""

import json
import os
import shutil

import pytest
from ansible.errors import AnsibleActionFail

from ansible_collections.llmtrain.slurm.plugins.action import collect_run as run

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "trainers", "lightning_2.6.6.tfevents")


@pytest.fixture
def events(tmp_path):
    path = str(tmp_path / "events.out.tfevents.1796465968.vm.23609.0")
    shutil.copy(FIXTURE, path)
    return [path]


@pytest.mark.parametrize("args, total, max_steps, expected", [
    ((), None, None, None),
    (("--max_steps", "30"), None, None, 30),
    (("--max_steps=30",), None, 90, 30),  # the arguments before a Trainer's state
    (("--max_steps", "30"), 60, 90, 60),  # yours before both
    (("--max_steps", "-1"), None, 90, 90),
    (("--max_steps", "-1"), None, None, None),
])
def test_each_records_total(events, args, total, max_steps, expected):
    found = run.event_metrics(events, None, total, list(args), max_steps)
    records = [json.loads(line) for line in found["text"].splitlines()]
    assert [r["step"] for r in records] == [4, 9, 14, 19, 24, 29] and found["source"] == "events"
    assert [r.get("total_steps") for r in records] == [expected] * 6


def test_script_args_must_be_a_list(events):
    with pytest.raises(AnsibleActionFail, match=r"pretrain_script_args must be a list"):
        run.event_metrics(events, None, None, "--max_steps 30")
