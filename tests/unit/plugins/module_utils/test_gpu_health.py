"""GPU faults the node check sees (llmtrain_node.gpu_health), on real outputs of nvidia-smi -q,
the kernel log and dcgmi diag (tests/unit/fixtures/gpu_health/SOURCES.md says where each is from)."""

import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import gpu_health
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import Runner

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def fixture(name, folder="gpu_health"):
    with open(os.path.join(FIXTURES, folder, name)) as handle:
        return handle.read()


def under_a_gpu(snippet):
    """A snippet of one GPU's sections, under the GPU line nvidia-smi -q prints above them."""
    indent = "" if snippet.startswith("    ") else "    "
    return "GPU 00000000:3B:00.0\n" + "".join(indent + line + "\n" for line in snippet.splitlines())


def findings(text):
    return [gpu_health.gpu_findings(values) for _bus, values in gpu_health.parse_query(text)]


def test_a_healthy_h200_has_no_finding():
    gpus = gpu_health.parse_query(fixture("h200_q_health.txt", "nvidia_smi"))
    assert [bus for bus, _values in gpus] == ["00000000:00:06.0"]
    values = gpus[0][1]
    assert values[("clocks event reasons", "hw slowdown", "hw thermal slowdown")] == "Not Active"
    assert values[("remapped rows", "bank remap availability histogram", "max")] == "3072 bank(s)"
    assert findings(fixture("h200_q_health.txt", "nvidia_smi")) == [([], [])]


def test_a_row_remapping_pending_needs_a_reset():
    (faults, notes), = findings(fixture("a10_q_remapped_rows_pending.txt"))
    assert faults == ["a row remapping is pending: " + gpu_health.RESET] and notes == []
    (faults, notes), = findings(fixture("a100_q_remapped_rows_pending_partial.txt"))
    assert faults == ["a row remapping is pending: " + gpu_health.RESET]
    assert notes == ["177 correctable ECC error(s) since the driver loaded"]


def test_uncorrectable_errors_since_the_driver_loaded_count_not_the_aggregate():
    (faults, _notes), = findings(under_a_gpu(fixture("ecc_sram_uncorrectable_snippet.txt")))
    assert faults == ["1 uncorrectable ECC error(s) since the driver loaded (sram uncorrectable 1): " + gpu_health.RESET]


def test_a_pending_page_retirement_of_an_older_gpu():
    (faults, _notes), = findings(under_a_gpu(fixture("retired_pages_pending_snippet.txt")))
    assert faults == ["a page retirement is pending (pending page blacklist): " + gpu_health.RESET]


def test_clocks_held_down_by_the_hardware_on_every_gpu_and_on_an_older_driver():
    found = findings(fixture("h100x8_q_power_brake_slowdown.txt"))
    assert len(found) == 8
    assert set(faults[0] for faults, _notes in found) == {
        "hw power brake slowdown, hw slowdown active: " + gpu_health.SLOWED}
    (faults, _notes), = findings(under_a_gpu(fixture("v100_throttle_reasons_snippet.txt")))
    assert faults == ["hw power brake slowdown, hw slowdown active: " + gpu_health.SLOWED]


@pytest.mark.parametrize("name, faulty, notes", [
    ("dmesg_xid13_xid43.log", [], [(13, 629), (43, 7)]),  # an application's faults
    ("dmesg_xid119.log", [(119, 5)], []),
    ("kernel_xid79_partial.txt", [(79, 1)], []),
    ("syslog_xid48_truncated.txt", [(48, 1)], []),
    ("dmesg_xid63_line.txt", [], [(63, 1)]),  # a row marked for remapping: nvidia-smi says when it is pending
    ("journal_xid45_partial.txt", [], [(45, 7)]),
])
def test_the_xids_that_ask_for_a_reset_or_a_reboot_are_faults_the_others_notes(name, faulty, notes):
    xids = gpu_health.parse_xids(fixture(name))
    faults, said = gpu_health.xid_findings(xids)
    assert [(code, xids[code]["count"]) for code in sorted(xids) if code in gpu_health.XID_ACTIONS] == faulty
    assert [(code, xids[code]["count"]) for code in sorted(xids) if code not in gpu_health.XID_ACTIONS] == notes
    assert len(faults) == len(faulty) and len(said) == len(notes)


def test_an_xid_line_says_its_device_its_count_and_its_last_line():
    xids = gpu_health.parse_xids(fixture("dmesg_xid119.log"))
    faults, _notes = gpu_health.xid_findings(xids)
    assert faults[0].startswith("Xid 119 (GSP RPC timeout) x5 on PCI:0000:9b:00 since the driver loaded (last: NVRM: Xid "
                                "(PCI:0000:9b:00): 119, pid=")
    assert faults[0].endswith(": " + gpu_health.RESET)
    xids = gpu_health.parse_xids(fixture("journal_xid45_partial.txt"))
    assert xids[45]["devices"] == ["PCI:0000:dc:00", "PCI:0000:ed:00", "PCI:0000:ba:00", "PCI:0000:97:00"]


def test_an_xid_code_of_other_digits_than_0_to_9_is_no_xid():
    """The kernel writes the code in 0-9; Arabic-Indic 79 is some other line."""
    line = "NVRM: Xid (PCI:0000:3b:00): %s, pid=1, GPU has fallen off the bus.\n"
    xids = gpu_health.parse_xids(line % "\u0667\u0669" + line % "\u00b2" + line % "79")
    assert [(code, xids[code]["count"]) for code in xids] == [(79, 1)]


def test_xids_before_the_driver_last_loaded_are_past():
    log = fixture("kernel_xid79_partial.txt") + "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  580.159.04\n"
    assert gpu_health.parse_xids(log) == {}
    assert list(gpu_health.parse_xids(log + fixture("syslog_xid48_truncated.txt"))) == [48]


def test_a_diagnostic_that_failed_names_the_test_and_why():
    faults, notes = gpu_health.diag_findings(gpu_health.parse_diag(fixture("dcgmi_diag_r3_fail_h100x8.txt")), 3)
    assert len(faults) == 1 and notes == []
    assert faults[0].startswith("dcgmi diag -r 3: GPU Memory: Fail - All (GPU 0 Error using CUDA API cuInit Check DCGM "
                                "and system logs for errors. Reset GPU. Restart DCGM.")
    faults, _notes = gpu_health.diag_findings(gpu_health.parse_diag(fixture("dcgmi_diag_memory_fail_gpu0_partial.txt")), 2)
    assert faults == ["dcgmi diag -r 2: GPU Memory: Fail - GPU: 0 (GPU 0 Error using CUDA API cuCtxCreate Check DCGM "
                      "and system logs for errors. Reset GPU. Restart DCGM. Rerun diagnostics. Unable to create CUDA "
                      "context: 'CUDA-capable device(s) is/are busy or unavailable'.)"]
    faults, _notes = gpu_health.diag_findings(gpu_health.parse_diag(fixture("dcgmi_diag_error_snippet.txt")), 1)
    assert faults == ["dcgmi diag -r 1: GPU 3 has uncorrectable memory errors and row remappings are pending"]
    faults, _notes = gpu_health.diag_findings(gpu_health.parse_diag(fixture("dcgmi_diag_r2_thermal_snippet.txt")), 2)
    assert len(faults) == 1 and faults[0].startswith("dcgmi diag -r 2: GPU Memory: Fail - GPU: 0 (GPU 0 Thermal violations")


def test_a_diagnostic_that_passed_or_skipped_is_no_fault():
    rows = gpu_health.parse_diag(fixture("dcgmi_diag_r3_pass_skipped.txt"))
    assert ("Denylist", ["Pass"], "") in rows and ("EUD Test", ["Skip - All"], "") in rows
    assert gpu_health.diag_findings(rows, 3) == ([], [])


def test_check_runs_each_tool_once_and_says_what_it_could_not_read():
    runner = Runner((["/x/nvidia-smi", "-q"], (0, fixture("a10_q_remapped_rows_pending.txt"), "")),
                    (["/x/dmesg"], (1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")),
                    (["/x/dcgmi", "diag", "-r", "1"],
                     (255, "Error: unable to establish a connection to the specified host: localhost\n", "")))
    found = gpu_health.check("/x/nvidia-smi", runner, dmesg="/x/dmesg", dcgmi="/x/dcgmi", diag_level=1)
    assert found["faults"] == ["GPU 0 (00000000:07:00.0): a row remapping is pending: " + gpu_health.RESET]
    assert found["notes"] == [
        "the kernel log is not readable here (dmesg: dmesg: read kernel buffer failed: Operation not permitted): "
        "Xid errors not checked",
        "dcgmi diag -r 1 did not run (exit 255): Error: unable to establish a connection to the specified host: localhost"]
    assert [call[0] for call in runner.calls] == ["/x/nvidia-smi", "/x/dmesg", "/x/dcgmi"]
    quiet = gpu_health.check("/x/nvidia-smi", Runner((["/x/nvidia-smi"], (0, fixture("h200_q_health.txt", "nvidia_smi"), ""))),
                             dcgmi=None, diag_level=2)
    eight = gpu_health.check("/x/nvidia-smi", Runner((["/x/nvidia-smi"], (0, fixture("h100x8_q_power_brake_slowdown.txt"), ""))))
    assert eight["faults"] == ["GPUs 0, 1, 2, 3, 4, 5, 6, 7: hw power brake slowdown, hw slowdown active: " + gpu_health.SLOWED]
    assert quiet["faults"] == [] and quiet["notes"] == [
        "no dmesg on the node: Xid errors not checked",
        "run_gpu_diag=2: no dcgmi on the node (DCGM is not installed): no diagnostic"]
