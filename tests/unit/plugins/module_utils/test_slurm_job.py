"""module_utils/node/slurm_job.py: the job as scontrol must name it to act on it alone."""

from ansible_collections.llmtrain.slurm.plugins.module_utils.node.slurm_job import own_id


def test_a_job_is_its_id_and_a_task_of_an_array_its_array_and_index():
    assert own_id({"SLURM_JOB_ID": "12"}) == "12"
    # the array's last task: its SLURM_JOB_ID is the array's (fixtures/slurm/arrays/requeue-*.txt)
    assert own_id({"SLURM_JOB_ID": "10", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "2"}) == "10_2"
    assert own_id({"SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "1"}) == "10_1"
    assert own_id({"SLURM_JOB_ID": "12", "SLURM_ARRAY_JOB_ID": "10", "SLURM_ARRAY_TASK_ID": "1;x"}) == "12"
    assert own_id({}) == ""
