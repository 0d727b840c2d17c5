from ansible_collections.llmtrain.slurm.plugins.filter import deploy, run


def test_env_file_values_reads_back_what_the_env_template_quotes():
    text = ("# Sourced by the training job on every node\n"
            "export NCCL_SOCKET_IFNAME=eth0\n"
            "export NCCL_IB_HCA='mlx5_0:1,mlx5_1:1'\n"
            "export WEIRD='a b'\"'\"'c $(x)'\n"
            "echo not an export\n")
    assert run.env_file_values(text) == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0:1,mlx5_1:1",
                                         "WEIRD": "a b'c $(x)"}
    assert run.env_file_values("") == {}


def test_a_venv_is_made_only_where_nothing_of_the_users_is():
    assert deploy.venv_dir_errors("/shared/venvs/t", None, "/shared/venvs/t/bin/python", "/shared") == []
    assert deploy.venv_dir_errors("/shared/venvs/t", [], "/shared/venvs/t/bin/python", "/shared") == []
    assert deploy.venv_dir_errors("/shared/venvs/t", ["bin", "lib", ".llmtrain-venv"], "x", "/shared") == []
    assert deploy.venv_dir_errors("/shared/venvs/t", ["bin", ".llmtrain-venv.json"], "x", "/shared") == []


def test_a_directory_of_the_users_is_refused_naming_it_and_the_fix():
    [message] = deploy.venv_dir_errors("/usr", ["bin", "lib", "share", "include", "local", "sbin", "src"],
                                       "/usr/bin/python3", "/shared/ws/")
    assert message.startswith("deploy_venv_create=true makes the venv that slurm_python=/usr/bin/python3 names")
    assert "/usr holds files that are not a venv made by llmtrain.slurm (bin, include, lib, local, sbin, ...)" in message
    assert "such as /shared/ws/venvs/llmtrain/bin/python, or set deploy_venv_create=false" in message
    [message] = deploy.venv_dir_errors("/home/u/x", False, "/home/u/x/bin/python", "/ws")
    assert "/home/u/x is not a directory" in message
