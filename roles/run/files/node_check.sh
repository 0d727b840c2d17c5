#!/usr/bin/env bash
# The node check: the first step of every job of a run, on the nodes Slurm gave the job.
#
#   node_check.sh [llmtrain_node.node_check check options: --gpus N, --require-torch]
#
# Its settings come from node_check.conf beside it, which the run role writes on every run
# (slurm_python, slurm_node_check_timeout, run_bad_node_policy, run_requeue_max,
# run_gpu_policy, run_gpu_diag, and how the run's container is started, from slurm_container_*): they are
# the run's, not part of any one job, so changing them never makes a finished job run again.
# In a container, every Python below runs in it: the check on each node and the judging.
#
# The batch node asks Slurm once for the job's nodes (`scontrol show node -o`); then one task per
# node runs `python -m llmtrain_node.node_check check` (GPUs, the GPUs Slurm registers from that answer, Python,
# torch where the job asks for GPUs or gives --require-torch, the interfaces of the node's env
# file, a token the batch node wrote, a write test), bounded by timeout_s; the batch node then
# judges the records (`... gather`), prints the per-node table and writes
# $LLMTRAIN_RUN_DIR/node_check/<job name>.json. Bad nodes are added to
# $LLMTRAIN_RUN_DIR/bad_nodes.json.
#
# Exit status (exit_codes.sh beside it; docs/exit-codes.md): 0 every node is good (go on);
# EXIT_REQUEUED_HELD the job has asked Slurm to requeue it held (policy exclude, requeues left):
# the watcher excludes the bad nodes and releases it, and the job script ends without starting
# anything; EXIT_NODE_CHECK_FAILED bad nodes and no requeue (policy fail, or requeues used up),
# or slurm_python does not run; anything else: the check itself failed (EXIT_FAILED).
set -u
scripts=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=exit_codes.sh
. "${scripts}/exit_codes.sh" || exit 1
python=python3 timeout_s=120 policy=exclude requeue_max=0 gpu_policy=strict gpu_diag=0
container_step=() container_task=() container_batch=()
# shellcheck source=/dev/null  # written by the run role: python=, timeout_s=, policy=, ...
. "${scripts}/node_check.conf" || exit "${EXIT_FAILED}"
# the check is the llmtrain_node package beside this file (python -m llmtrain_node.node_check),
# found first on the path, before any of the same name that slurm_env_setup may add; in the
# run's container (slurm_container_runtime), whose image may set PYTHONPATH itself, Python finds
# it in its working directory, this one (python -m puts that first on the path)
export PYTHONPATH="${scripts}${PYTHONPATH:+:${PYTHONPATH}}"
# (${a[@]+"${a[@]}"}: an array's words, none when it is empty; bash before 4.4 calls an empty
# "${a[@]}" unbound under set -u)
# the run directory holds scripts/ (this file's directory)
LLMTRAIN_RUN_DIR=${LLMTRAIN_RUN_DIR:-$(dirname "${scripts}")}
restart=${SLURM_RESTART_COUNT:-0}
dir="${LLMTRAIN_RUN_DIR}/node_check/${SLURM_JOB_ID}.${restart}"
token="${SLURM_JOB_ID}.${restart}.$$.${RANDOM}${RANDOM}"
mkdir -p "${dir}" && printf '%s\n' "${token}" > "${dir}/token" || {
    echo "llmtrain: node check: cannot write ${dir} on the batch node $(hostname): is slurm_workspace writable there?" >&2
    exit "${EXIT_FAILED}"
}
if ! ${container_batch[@]+"${container_batch[@]}"} "${python}" -c '' 2> "${dir}/python.err"; then
    if [ ${#container_batch[@]} -gt 0 ]; then
        echo "llmtrain: node check: slurm_python=${python} does not run in the run's container on $(hostname)" \
             "($(tail -c 300 "${dir}/python.err")): point slurm_python at the interpreter inside the image," \
             "and check slurm_container_image, slurm_container_runtime and that its runtime works on the nodes" >&2
    else
        echo "llmtrain: node check: slurm_python=${python} does not run on $(hostname) after slurm_env_setup" \
             "($(tail -c 300 "${dir}/python.err")): install Python there, or point slurm_python (and slurm_env_setup," \
             "e.g. module load) at one that runs" >&2
    fi
    rm -rf "${dir}"
    exit "${EXIT_NODE_CHECK_FAILED}"
fi
nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST}")
# What Slurm registers for the job's nodes, in one query for all of them (one per node would
# be as many calls to the controller as the job has nodes, at every start); each node's check
# reads its own line, and says "?" (Slurm cannot tell) when the query failed.
if ! timeout 60 scontrol show node -o "${SLURM_JOB_NODELIST}" > "${dir}/slurm_nodes.txt" 2> "${dir}/slurm_nodes.err"; then
    echo "llmtrain: node check: 'scontrol show node -o ${SLURM_JOB_NODELIST}' failed on $(hostname)" \
         "($(tail -c 300 "${dir}/slurm_nodes.err")): the GPUs Slurm registers are not compared this start;" \
         "check that the controller answers there" >&2
    rm -f "${dir}/slurm_nodes.txt"
fi
echo "llmtrain: node check of job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} ($(echo ${nodes} | wc -w) node(s), ${timeout_s} s at most)"
timeout --kill-after=10 "${timeout_s}" srun --ntasks="${SLURM_JOB_NUM_NODES}" --ntasks-per-node=1 \
    --kill-on-bad-exit=0 --job-name=node-check ${container_step[@]+"${container_step[@]}"} ${container_task[@]+"${container_task[@]}"} \
    "${python}" -m llmtrain_node.node_check check --dir "${dir}" --token "${token}" --run-dir "${LLMTRAIN_RUN_DIR}" \
    --gpu-policy "${gpu_policy}" --gpu-diag "${gpu_diag}" --slurm-nodes "${dir}/slurm_nodes.txt" "$@" > "${dir}/step.out"
step=$?
[ "${step}" -eq 0 ] || echo "llmtrain: node check step ended with exit code ${step}" >&2
# shellcheck disable=SC2086  # one argument per node name
${container_batch[@]+"${container_batch[@]}"} "${python}" -m llmtrain_node.node_check gather --dir "${dir}" --token "${token}" --nodes ${nodes} \
    --out "${LLMTRAIN_RUN_DIR}/node_check/${SLURM_JOB_NAME}.json" --bad-nodes-file "${LLMTRAIN_RUN_DIR}/bad_nodes.json" \
    --timeout "${timeout_s}" --python "${python}" --job "${SLURM_JOB_ID}" --restart "${restart}"
verdict=$?
rm -rf "${dir}"
case ${verdict} in
    0) exit 0 ;;
    "${EXIT_BAD_NODES}") ;;
    *) echo "llmtrain: node check: ${python} could not judge the records on the batch node $(hostname) (exit ${verdict})" >&2
       exit "${EXIT_FAILED}" ;;
esac
# shellcheck source=bad_nodes.sh
. "${scripts}/bad_nodes.sh" || exit "${EXIT_FAILED}"
requeue_without_bad_nodes "node check" "${policy}" "${restart}" "${requeue_max}"
[ $? -eq "${EXIT_REQUEUED_HELD}" ] && exit "${EXIT_REQUEUED_HELD}"
exit "${EXIT_NODE_CHECK_FAILED}"
