import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmtrain.slurm.plugins.filter import nccl_env


def test_filters_read_only_nccl_env_variables():
    hostvars = dict(nccl_env_socket_ifname="ib0", nccl_env_ib_hca="mlx5_0:1", slurm_nodes=3, inventory_hostname="n1")
    assert nccl_env.nccl_env(hostvars) == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_IB_HCA": "mlx5_0:1",
                                           "GLOO_SOCKET_IFNAME": "ib0"}
    assert nccl_env.nccl_env_errors(hostvars) == []


def test_bad_values_fail_with_every_message():
    hostvars = dict(nccl_env_debug="LOUD", nccl_env_cross_nic=7)
    with pytest.raises(AnsibleFilterError) as error:
        nccl_env.nccl_env(hostvars)
    assert "nccl_env_debug='LOUD'" in str(error.value) and "nccl_env_cross_nic=7" in str(error.value)
    assert len(nccl_env.nccl_env_errors(hostvars)) == 2
    assert set(nccl_env.FilterModule().filters()) == {"nccl_env", "nccl_node_envs", "nccl_env_errors",
                                                      "nccl_interfaces", "env_name_errors"}


def test_node_values_override_the_cluster_wide_ones():
    cluster = dict(nccl_env_socket_ifname="eth0", nccl_env_ib_hca="mlx5_0:1", nccl_env_async_error_handling=3)
    node = dict(nccl_env_ib_hca="mlx5_2:1")
    assert nccl_env.nccl_env(cluster, node) == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_2:1",
                                                "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3", "GLOO_SOCKET_IFNAME": "eth0"}


CLUSTER = dict(nccl_env_socket_ifname="eth0", nccl_env_ib_hca="mlx5_0:1", nccl_env_async_error_handling=3,
               nccl_env_debug=None, slurm_nodes=4)


def test_node_envs_are_those_of_the_nodes_whose_values_differ():
    # each node's host vars repeat the group values, as hostvars does
    hostvars = {name: dict(CLUSTER, inventory_hostname=name) for name in ("n0", "n1", "n2", "n3")}
    hostvars["n1"].update(nccl_env_ib_hca="mlx5_1:1", nccl_env_debug="info")
    hostvars["n2"].update(nccl_env_ib_hca="mlx5_0:1")  # the cluster-wide value again: no file of its own
    hostvars["n3"].update(nccl_env_debug="")  # unset either way
    assert nccl_env.nccl_node_envs(CLUSTER, hostvars, ["n0", "n1", "n2", "n3"]) == {
        "n1": {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_1:1",
               "NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}}
    assert nccl_env.nccl_node_envs(CLUSTER, hostvars, []) == {}


def test_node_envs_fail_naming_the_bad_nodes_and_what_is_wrong():
    hostvars = {"n%d" % i: dict(CLUSTER, nccl_env_cross_nic=7) for i in range(13)}
    hostvars["n0"] = dict(CLUSTER)
    with pytest.raises(AnsibleFilterError) as error:
        nccl_env.nccl_node_envs(CLUSTER, hostvars, sorted(hostvars))
    message = str(error.value)
    assert message.startswith("Invalid NCCL/UCX/Gloo settings:\nn1 (its host vars laid over the group values):\n")
    assert "nccl_env_cross_nic=7 is not a valid NCCL_CROSS_NIC" in message
    assert "Also invalid on 11 other node(s): n10, n11, n12, n2, n3, n4, n5, n6, n7, n8, ..." in message
    with pytest.raises(AnsibleFilterError, match="nccl_env_debug='LOUD'"):
        nccl_env.nccl_node_envs(dict(CLUSTER, nccl_env_debug="LOUD"), {}, [])


def test_env_name_errors_name_each_bad_name():
    secrets = {"WANDB_API_KEY": "x", "_OK1": "y", "1X": "z", "A B": "w", "A=B": "v"}
    assert nccl_env.env_name_errors(secrets, "slurm_secret_env key") == [
        "slurm_secret_env key %r is not an environment variable name (letters, digits and _, not starting with a "
        "digit)." % name for name in ("1X", "A B", "A=B")]
    assert nccl_env.env_name_errors(["PATH"], "env key") == []
