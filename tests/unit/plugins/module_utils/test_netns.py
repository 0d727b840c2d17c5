import os

from ansible_collections.llmtrain.slurm.plugins.module_utils.local_cluster import netns

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "ip")


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


# Recorded from a running 3-node local cluster.
NAMESPACES = netns.parse_netns_list(fixture("netns_list.txt"))
LINKS = netns.parse_links(fixture("link_show.json"))
ADDRESSES = netns.parse_addresses(fixture("addr_show.json"))
NS_LINKS = netns.parse_links(fixture("ns_link_show.json"))
NS_ADDRESSES = netns.parse_addresses(fixture("ns_addr_show.json"))
NODE1 = dict(namespace="llmt-slurm-worker-1", veth="llmtv1", address="10.213.0.11/24")


def test_parsers_read_recorded_output():
    assert sorted(NAMESPACES) == ["llmt-slurm-worker-0", "llmt-slurm-worker-1", "llmt-slurm-worker-2"]
    assert LINKS["llmtv1"] == dict(master="llmtbr0", up=True)
    assert LINKS["ifb0"]["up"] is False
    assert ADDRESSES["llmtbr0"] == ["10.213.0.1/24"]
    assert ADDRESSES["llmtv1"] == []  # IPv6 link-local only: not listed
    assert NS_ADDRESSES["eth0"] == ["10.213.0.11/24"]
    assert NS_LINKS["lo"]["up"] and NS_LINKS["eth0"]["up"]


def test_netns_list_without_ids():
    assert netns.parse_netns_list("a\nb (id: 3)\n\n") == ["a", "b"]


def test_nothing_to_do_on_a_running_cluster():
    assert netns.plan_bridge("llmtbr0", "10.213.0.1/24", LINKS, ADDRESSES) == []
    assert netns.plan_node(NODE1, "llmtbr0", "eth0", NAMESPACES, LINKS, NS_LINKS, NS_ADDRESSES) == []


def test_fresh_machine_builds_everything_in_order():
    assert netns.plan_bridge("llmtbr0", "10.213.0.1/24", {}, {}) == [
        ["ip", "link", "add", "name", "llmtbr0", "type", "bridge"],
        ["ip", "addr", "add", "10.213.0.1/24", "dev", "llmtbr0"],
        ["ip", "link", "set", "llmtbr0", "up"],
    ]
    assert netns.plan_node(NODE1, "llmtbr0", "eth0", [], {}, {}, {}) == [
        ["ip", "netns", "add", "llmt-slurm-worker-1"],
        ["ip", "link", "add", "llmtv1", "type", "veth", "peer", "name", "eth0", "netns", "llmt-slurm-worker-1"],
        ["ip", "link", "set", "llmtv1", "master", "llmtbr0"],
        ["ip", "link", "set", "llmtv1", "up"],
        ["ip", "-n", "llmt-slurm-worker-1", "addr", "add", "10.213.0.11/24", "dev", "eth0"],
        ["ip", "-n", "llmt-slurm-worker-1", "link", "set", "eth0", "up"],
        ["ip", "-n", "llmt-slurm-worker-1", "link", "set", "lo", "up"],
    ]


def test_namespace_that_lost_its_veth_gets_a_new_pair():
    links = {k: v for k, v in LINKS.items() if k != "llmtv1"}
    ns_links = {"lo": dict(master=None, up=True)}
    steps = netns.plan_node(NODE1, "llmtbr0", "eth0", NAMESPACES, links, ns_links, {})
    assert ["ip", "netns", "add", "llmt-slurm-worker-1"] not in steps
    assert steps[0][:4] == ["ip", "link", "add", "llmtv1"]
    assert ["ip", "-n", "llmt-slurm-worker-1", "addr", "add", "10.213.0.11/24", "dev", "eth0"] in steps


def test_veth_left_without_its_namespace_end_is_replaced():
    steps = netns.plan_node(NODE1, "llmtbr0", "eth0", NAMESPACES, LINKS, {}, {})
    assert steps[:2] == [["ip", "link", "del", "llmtv1"],
                         ["ip", "link", "add", "llmtv1", "type", "veth", "peer", "name", "eth0",
                          "netns", "llmt-slurm-worker-1"]]


def test_changed_address_is_added():
    steps = netns.plan_node(dict(NODE1, address="10.99.0.11/24"), "llmtbr0", "eth0", NAMESPACES,
                            LINKS, NS_LINKS, NS_ADDRESSES)
    assert steps == [["ip", "-n", "llmt-slurm-worker-1", "addr", "add", "10.99.0.11/24", "dev", "eth0"]]


def test_remove_node():
    assert netns.plan_remove_node("llmt-slurm-worker-1", "llmtv1", NAMESPACES, LINKS) == [
        ["ip", "link", "del", "llmtv1"], ["ip", "netns", "del", "llmt-slurm-worker-1"]]
    assert netns.plan_remove_node("llmt-x", "llmtv9", NAMESPACES, LINKS) == []


def test_removing_leaves_a_bridge_that_was_there_before_taking_off_only_its_address():
    links = {"llmtbr0": {"up": True}}
    addresses = {"llmtbr0": ["10.213.0.1/24", "192.0.2.1/24"]}
    assert netns.plan_remove_bridge("llmtbr0", "10.213.0.1/24", links, addresses, made=True) == [
        ["ip", "link", "del", "llmtbr0"]]
    assert netns.plan_remove_bridge("llmtbr0", "10.213.0.1/24", links, addresses, made=False) == [
        ["ip", "addr", "del", "10.213.0.1/24", "dev", "llmtbr0"]]
    assert netns.plan_remove_bridge("llmtbr0", "10.213.0.9/24", links, addresses, made=False) == []
    assert netns.plan_remove_bridge("llmtbr0", "10.213.0.1/24", {}, {}, made=True) == []
