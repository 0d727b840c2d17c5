# a few seconds on CPU: what the integration tests train
config_name = "tiny"
max_iters = 20
batch_size = 4
block_size = 16
n_embd = 16
