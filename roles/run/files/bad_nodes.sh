# Sourced by the checks that open every job (node_check.sh, network_check.sh), after
# exit_codes.sh: what a check that found bad nodes does with the job, once they are recorded
# in bad_nodes.json.
#
#   requeue_without_bad_nodes CHECK POLICY RESTART REQUEUE_MAX
#
# With POLICY exclude and requeues left, asks Slurm to requeue the job held and returns
# EXIT_REQUEUED_HELD: the watcher (the sbatch module watching the job,
# plugins/module_utils/watch/exclusion.py) excludes the recorded bad
# nodes, releases the job, and it starts again on other nodes. Returns 1 when it did not
# (another policy, requeues used up, or scontrol failed), saying why.
requeue_without_bad_nodes() {
    local check=$1 policy=$2 restart=$3 requeue_max=$4
    # this job alone: a task of an array by <array>_<index> (its SLURM_JOB_ID may be the array's, node/slurm_job.py)
    local job=${SLURM_JOB_ID}
    if [ -n "${SLURM_ARRAY_JOB_ID:-}" ] && [ -n "${SLURM_ARRAY_TASK_ID:-}" ]; then
        job="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
    fi
    if [ "${policy}" = exclude ] && [ "${restart}" -lt "${requeue_max}" ]; then
        echo "llmtrain: ${check}: requeue $((restart + 1)) of ${requeue_max} without the bad node(s), held until the watcher excludes them"
        if scontrol requeuehold "${job}"; then
            return "${EXIT_REQUEUED_HELD}"
        fi
        echo "llmtrain: ${check}: scontrol requeuehold ${job} failed" >&2
    elif [ "${policy}" = exclude ]; then
        echo "llmtrain: ${check}: bad node(s) and run_requeue_max=${requeue_max} requeues are used up" >&2
    fi
    return 1
}
