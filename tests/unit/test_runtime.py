"""meta/runtime.yml: the ansible-core versions the collection accepts."""

import os

import yaml
from packaging.specifiers import SpecifierSet

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ansible_core_2_16_0_is_refused_for_its_template_injection_cve_2023_5764():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        accepted = SpecifierSet(yaml.safe_load(handle)["requires_ansible"])
    assert "2.16.0" not in accepted
    assert "2.16.1" in accepted and "2.19.14" in accepted
