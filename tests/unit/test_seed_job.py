"""playbooks/seed_job.yml: the check that every rank of every node took part, run by Ansible's own
templating on the job's output (the job itself runs in the integration tests)."""

import base64
import os
import warnings

import jinja2
import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check_task():
    with open(os.path.join(ROOT, "playbooks", "seed_job.yml"), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    [task] = [t for play in plays for t in play.get("tasks", []) if t["name"] == "Check that every rank of every node took part"]
    return task


def took_part(output, nodes=1, procs_per_node=2):
    """(the ranks the check found in the job's output, whether its assertions hold)."""
    task = check_task()
    variables = dict(slurm_nodes=nodes, slurm_procs_per_node=procs_per_node,
                     seed_job_output=dict(content=base64.b64encode(output.encode("utf-8")).decode("ascii")))
    variables.update((name, trust_as_template(value)) for name, value in task["vars"].items())
    templar = Templar(loader=DataLoader(), variables=variables)
    ranks = templar.template(trust_as_template("{{ ranks }}"))
    return ranks, all(templar.evaluate_conditional(trust_as_template(that)) for that in task["ansible.builtin.assert"]["that"])


def line(rank, world=2, node="n1", total=3):
    return "rank=%s world=%s node=%s sum=%s\n" % (rank, world, node, total)


def test_every_rank_that_printed_its_line_took_part():
    assert took_part(line(0) + "noise\n" + line(1, node="n2")) == (
        ["rank=0 world=2 node=n1 sum=3", "rank=1 world=2 node=n2 sum=3"], True)
    assert took_part(line(0)) == (["rank=0 world=2 node=n1 sum=3"], False)
    assert took_part(line(0) + line(1, total=2))[1] is False


@pytest.mark.parametrize("digit", ["\u0661", "\uff11", "\u00b9"])
def test_a_line_in_other_digits_than_ascii_is_no_rank(digit):
    """Arabic-Indic, fullwidth and superscript digits are what \\d also matches; the script prints none."""
    assert took_part(line(0) + line(digit)) == (["rank=0 world=2 node=n1 sum=3"], False)
    assert took_part(line(0) + line(1) + line(digit, world=digit, total=digit))[1] is True


def test_its_jinja_holds_no_escape_that_jinja_and_ansible_read_differently():
    """Ansible doubles a Jinja string's backslashes before Jinja reads it, Jinja alone reads them as
    escapes ('\\d' is an invalid one): the check holds none."""
    task = check_task()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for text in list(task["vars"].values()) + task["ansible.builtin.assert"]["that"]:
            assert "\\" not in text
            jinja2.Environment().parse(text if "{{" in text else "{{ %s }}" % text)
