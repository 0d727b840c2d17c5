"""link_speed: the links a job's collectives go through, as the nodes report their speed."""

import os

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import link_speed

# `nvidia-smi nvlink -s` on a node of four GPUs, one link down
NVLINK = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)
\t Link 0: 26.562 GB/s
\t Link 1: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
"""


@pytest.mark.parametrize("text, gbps", [
    ("25000\n", 25.0), ("100000\n", 100.0), ("10000", 10.0), ("1000\n", 1.0),
    ("-1\n", None),  # a veth, or a link that is down
    ("", None),  # reading the file failed: "Invalid argument" for a veth
    ("unknown\n", None), ("0\n", None),
    # other scripts' digits (which int() reads), '1_000' (which int() reads as 1000): no speed
    ("\u0662\u0665\u0660\u0660\u0660\n", None), ("\uff11\uff10\uff10\uff10", None), ("\u00b2", None), ("1_000\n", None),
])
def test_ethernet_speed_from_sysfs(text, gbps):
    assert link_speed.ethernet_gbps(text) == gbps


@pytest.mark.parametrize("text, gbps", [
    ("400 Gb/sec (4X NDR)\n", 400.0), ("200 Gb/sec (4X HDR)\n", 200.0), ("100 Gb/sec (4X EDR)\n", 100.0),
    ("56 Gb/sec (4X FDR)\n", 56.0), ("2.5 Gb/sec (1X SDR)\n", 2.5), ("10 Gb/sec (4X)\n", 10.0),
    ("", None), ("0 Gb/sec\n", None), ("fast\n", None),
    ("\u0664\u0660\u0660 Gb/sec (4X NDR)\n", None), ("9" * 400 + " Gb/sec\n", None),  # float() read it as inf
])
def test_infiniband_rate_strings(text, gbps):
    assert link_speed.ib_rate_gbps(text) == gbps


def test_nvlink_summed_per_gpu_inactive_links_count_nothing():
    assert link_speed.nvlink_gbps(NVLINK) == {0: pytest.approx(2 * 26.562 * 8), 1: pytest.approx(26.562 * 8)}
    assert link_speed.nvlink_gbps("") == {}


def test_nvlink_numbers_in_other_digits_or_too_long_count_nothing():
    """A GPU's index int() would read ('\u0661') or refuse (thousands of digits), a speed float() would:
    not counted, no error."""
    text = NVLINK.replace("GPU 1:", "GPU \u0661:").replace("Link 0: 26.562", "Link 0: \u0662\u0666.562", 1)
    assert link_speed.nvlink_gbps(text) == {0: pytest.approx(26.562 * 8)}
    assert link_speed.nvlink_gbps("GPU %s: H100\n\t Link 0: 26.5 GB/s\n" % ("9" * 5000)) == {}
    assert link_speed.nvlink_gbps("GPU 0: H100\n\t Link 0: %s GB/s\n" % ("9" * 400)) == {0: 0.0}


@pytest.mark.parametrize("spec, exact, names", [
    ("", False, ["eth0", "eth1", "ib0", "lo"]),
    ("eth", False, ["eth0", "eth1"]),  # NCCL: prefixes
    ("=eth0", False, ["eth0"]),
    ("^eth,lo", False, ["ib0"]),
    ("eth0,ib0", True, ["eth0", "ib0"]),  # Gloo: exact names
    ("eth", True, []),
])
def test_nccl_style_lists_select_interfaces(spec, exact, names):
    assert link_speed.selected(["eth0", "eth1", "ib0", "lo"], spec, exact_by_default=exact) == names


def sysfs(tmp_path, files):
    for path, text in files.items():
        full = tmp_path / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return str(tmp_path)


IB_NODE = {
    "sys/class/infiniband/mlx5_0/ports/1/rate": "400 Gb/sec (4X NDR)\n",
    "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
    "sys/class/infiniband/mlx5_1/ports/1/rate": "400 Gb/sec (4X NDR)\n",
    "sys/class/infiniband/mlx5_1/ports/1/state": "4: ACTIVE\n",
    "sys/class/infiniband/mlx5_2/ports/1/rate": "400 Gb/sec (4X NDR)\n",
    "sys/class/infiniband/mlx5_2/ports/1/state": "1: DOWN\n",
    "sys/class/net/eth0/speed": "25000\n",
    "sys/class/net/lo/speed": "",
}


def test_nccl_on_infiniband_sums_the_active_ports_of_the_hcas_it_uses(tmp_path):
    root = sysfs(tmp_path, IB_NODE)
    assert link_speed.node_links({}, "nccl", root) == dict(kind="ib", interfaces=["mlx5_0:1", "mlx5_1:1"], gbps=800.0)
    assert link_speed.node_links({"NCCL_IB_HCA": "mlx5_0:1"}, "nccl", root)["gbps"] == 400.0
    assert link_speed.node_links({"NCCL_IB_HCA": "^mlx5_0"}, "nccl", root)["interfaces"] == ["mlx5_1:1"]


def test_without_infiniband_the_socket_interface_bounds_the_traffic(tmp_path):
    root = sysfs(tmp_path, IB_NODE)
    env = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth"}
    assert link_speed.node_links(env, "nccl", root) == dict(kind="socket", interfaces=["eth0"], gbps=25.0)
    # Gloo never uses InfiniBand verbs: its socket interface is what counts
    assert link_speed.node_links({"GLOO_SOCKET_IFNAME": "eth0"}, "gloo", root)["gbps"] == 25.0


def test_a_veth_reports_no_speed(tmp_path):
    root = sysfs(tmp_path, {"sys/class/net/eth0/speed": "", "sys/class/net/lo/speed": ""})
    assert link_speed.node_links({"GLOO_SOCKET_IFNAME": "eth0"}, "gloo", root) == dict(
        kind="socket", interfaces=["eth0"], gbps=None)
    # no interface named: every one but lo
    assert link_speed.node_links({}, "gloo", root)["interfaces"] == ["eth0"]


def test_this_machines_own_sysfs_reads_without_error():
    links = link_speed.node_links({}, "gloo")
    assert links["kind"] == "socket" and "lo" not in links["interfaces"]
    assert set(links["interfaces"]) <= set(os.listdir("/sys/class/net"))
