import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.node import nccl

SEED = dict(  # the seed's cluster
    nccl_env_socket_ifname="eth0",
    nccl_env_ib_hca="ib7s",
    nccl_env_ib_disable=0,
    nccl_env_debug="INFO",
    nccl_env_debug_subsys="ENV,INIT,GRAPH",
    nccl_env_ucx_net_devices="ib7s400p0:1,ib7s400p1:1",
)


def test_seed_settings_become_the_seed_environment():
    env, errors = nccl.build_env(SEED)
    assert errors == []
    assert env == {
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_IB_HCA": "ib7s",
        "NCCL_IB_DISABLE": "0",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "ENV,INIT,GRAPH",
        "UCX_NET_DEVICES": "ib7s400p0:1,ib7s400p1:1",
        "GLOO_SOCKET_IFNAME": "eth0",
    }


def test_unset_values_are_left_out_and_debug_stays_off():
    env, errors = nccl.build_env(dict(nccl_env_socket_ifname="eth0", nccl_env_debug=None, nccl_env_ib_hca=""))
    assert errors == [] and env == {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"}


@pytest.mark.parametrize("value, gloo", [("=eth0", "eth0"), ("^docker,lo", None), ("eth0,ib0", "eth0,ib0")])
def test_gloo_interface_follows_nccl_only_when_it_names_interfaces(value, gloo):
    env, errors = nccl.build_env(dict(socket_ifname=value))
    assert errors == [] and env.get("GLOO_SOCKET_IFNAME") == gloo


def test_explicit_gloo_interface_wins():
    env, _errors = nccl.build_env(dict(socket_ifname="ib0", gloo_socket_ifname="eth1"))
    assert env["GLOO_SOCKET_IFNAME"] == "eth1"


@pytest.mark.parametrize("var, value", [
    ("socket_ifname", "^=mlx5,lo"),
    ("ib_hca", "^=mlx5_0:1,mlx5_1"),
    ("ib_hca", "=mlx5_0"),
    ("net_gdr_level", "PHB"),
    ("net_gdr_level", "3"),
    ("debug", "warn"),
    ("debug_subsys", "^CALL,PROXY"),
    ("ucx_tls", "rc,ud,sm,self,cuda_copy"),
    ("ucx_tls", "^tcp"),
    ("ucx_net_devices", "all"),
    ("cross_nic", "2"),
    ("async_error_handling", "3"),
])
def test_valid_values(var, value):
    assert nccl.build_env({var: value})[1] == []


@pytest.mark.parametrize("var, value, words", [
    ("socket_ifname", "eth0;rm -rf /", "bad: 'eth0;rm -rf /'"),
    ("socket_ifname", "an-interface-name-too-long", "1-15 characters"),
    ("ib_hca", "mlx5_0:one", "mlx5_0:1"),
    ("ib_disable", "yes", "must be 0"),
    ("debug", "LOUD", "VERSION, WARN, INFO, TRACE"),
    ("debug_subsys", "INIT,NOPE", "bad: 'NOPE'"),
    ("net_gdr_level", "9", "LOC, PIX, PXB, PHB, SYS"),
    ("net_gdr_level", "\u0663", "or a number 0-5"),  # Arabic-Indic 3
    ("net_gdr_level", "\u00b2", "or a number 0-5"),
    ("cross_nic", "3", "0, 1 or 2"),
    ("async_error_handling", "on", "0, 1, 2 or 3"),
    ("ucx_net_devices", "mlx5_0:1,$(id)", "bad: '$(id)'"),
    ("ucx_tls", "rc,warp", "bad: 'warp'"),
    ("gloo_socket_ifname", "^eth0", "bad: '^eth0'"),
])
def test_invalid_values_name_the_variable_value_and_fix(var, value, words):
    env, errors = nccl.build_env({"nccl_env_" + var: value})
    assert len(errors) == 1
    assert errors[0].startswith("nccl_env_%s=%r is not a valid %s" % (var, value, nccl.VARIABLES[var]))
    assert words in errors[0]
    assert nccl.VARIABLES[var] not in env


def test_extra_variables():
    env, errors = nccl.build_env(dict(extra={"NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "TRACE", "FI_PROVIDER": "efa"}))
    assert errors == [] and env == {"NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "TRACE", "FI_PROVIDER": "efa"}
    env, errors = nccl.build_env(dict(extra={"BAD NAME": "x", "NCCL_DEBUG": "LOUD"}))
    assert len(errors) == 2 and "'BAD NAME'" in errors[0] and "nccl_env_extra.NCCL_DEBUG='LOUD'" in errors[1]
    assert nccl.build_env(dict(extra=["NCCL_X=1"]))[1][0].startswith("nccl_env_extra must be a mapping")


def test_interfaces_that_must_exist():
    env, _errors = nccl.build_env(dict(socket_ifname="=ib0,ib1", gloo_socket_ifname="eth0"))
    assert nccl.interfaces(env) == [
        dict(name="ib0", exact=True, variable="nccl_env_socket_ifname"),
        dict(name="ib1", exact=True, variable="nccl_env_socket_ifname"),
        dict(name="eth0", exact=True, variable="nccl_env_gloo_socket_ifname"),
    ]
    # NCCL matches the prefix "eth"; Gloo, given the same value by default, needs an interface named "eth"
    assert nccl.interfaces(nccl.build_env(dict(socket_ifname="eth"))[0]) == [
        dict(name="eth", exact=False, variable="nccl_env_socket_ifname"),
        dict(name="eth", exact=True, variable="nccl_env_gloo_socket_ifname")]
    assert nccl.interfaces(nccl.build_env(dict(socket_ifname="=eth0"))[0]) == [
        dict(name="eth0", exact=True, variable="nccl_env_socket_ifname")]
    assert nccl.interfaces(nccl.build_env(dict(socket_ifname="^docker,lo"))[0]) == []
