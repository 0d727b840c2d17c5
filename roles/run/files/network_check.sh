#!/usr/bin/env bash
# The network check: the training job's second step, right after the node check, on the same
# nodes. It measures all-reduce bus bandwidth and latency with the backend and the env files
# the training uses, reads each node's link speed, and names a slow node.
#
#   network_check.sh --gpus N --procs P --policy warn|exclude|fail --min-fraction F --timeout S
#
# python=, timeout_s=, requeue_max= and the run's container (container_step=, container_task=,
# container_batch=: each node's ranks and the verdict run in it) come from node_check.conf beside
# it (the run's). On
# GPUs, torch.distributed.run starts P ranks per node (NCCL, as the training); on CPUs one
# rank per node (Gloo; the processes of a node share its link). The port is the training's
# MASTER_PORT moved by 20000, so that the two never meet. Writes
# $LLMTRAIN_RUN_DIR/network_check/<job name>.json.
#
# Exit status (exit_codes.sh beside it; docs/exit-codes.md): 0 go on (the fabric is fine, or
# the policy is warn, or the check could not measure: it says so); EXIT_REQUEUED_HELD the job
# has asked Slurm to requeue it held without the slow node(s) (policy exclude);
# EXIT_NETWORK_CHECK_FAILED a slow node or fabric and policy fail.
set -u
scripts=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=exit_codes.sh
. "${scripts}/exit_codes.sh" || exit 1
python=python3 timeout_s=120 requeue_max=0
container_step=() container_task=() container_batch=()
# shellcheck source=/dev/null  # written by the run role: python=, timeout_s=, requeue_max=, ...
. "${scripts}/node_check.conf" || exit "${EXIT_FAILED}"
gpus=0 procs=1 policy=warn min_fraction=0.5 meet_s=60
while [ $# -gt 0 ]; do
    case $1 in
        --gpus) gpus=$2 ;;
        --procs) procs=$2 ;;
        --policy) policy=$2 ;;
        --min-fraction) min_fraction=$2 ;;
        --timeout) meet_s=$2 ;;
        *) echo "llmtrain: network check: unknown option $1" >&2; exit "${EXIT_SETTING}" ;;
    esac
    shift 2
done
LLMTRAIN_RUN_DIR=${LLMTRAIN_RUN_DIR:-$(dirname "${scripts}")}
restart=${SLURM_RESTART_COUNT:-0}
if [ "${SLURM_JOB_NUM_NODES}" -lt 2 ] && { [ "${gpus}" -lt 2 ] || [ "${procs}" -lt 2 ]; }; then
    echo "llmtrain: network check: one node, no collective goes through a network; nothing to measure"
    exit 0
fi
out_dir="${LLMTRAIN_RUN_DIR}/network_check"
mkdir -p "${out_dir}" || exit "${EXIT_FAILED}"
out="${out_dir}/${SLURM_JOB_NAME}.json"
rm -f "${out}"
# 8000 from the rendezvous port: an auto one (16000-23999) gives 24000-31999, below the ephemeral
# ports (32768 and up) that outgoing connections take, and apart from every job's auto MASTER_PORT
export LLMTRAIN_NETWORK_PORT=$(( MASTER_PORT < 24768 ? MASTER_PORT + 8000 : MASTER_PORT - 8000 ))
args=(--out "${out}" --gpus "${gpus}" --min-fraction "${min_fraction}" --job "${SLURM_JOB_ID}" --restart "${restart}"
      --timeout "${meet_s}")
[ "${policy}" = exclude ] && args+=(--bad-nodes-file "${LLMTRAIN_RUN_DIR}/bad_nodes.json")
export LLMTRAIN_NETWORK_PROCS=${procs} LLMTRAIN_PYTHON_CHECK=${python} LLMTRAIN_SCRIPTS=${scripts} LLMTRAIN_NETWORK_GPUS=${gpus}
echo "llmtrain: network check of job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST} (${timeout_s} s at most)"
# the env file of each node, as the training sources it; a rank that fails (the nodes cannot
# reach each other) ends the step at once
# shellcheck disable=SC2016  # expanded by the step's shell, on each node
timeout --kill-after=10 "${timeout_s}" srun --ntasks="${SLURM_JOB_NUM_NODES}" --ntasks-per-node=1 \
    --kill-on-bad-exit=1 --job-name=network-check ${container_step[@]+"${container_step[@]}"} \
    ${container_task[@]+"${container_task[@]}"} sh -c 'trap "" USR2  # the stop notice: ignored by torchrun; each rank records it (LLMTRAIN_STOP_NOTICE)
    env_file="${LLMTRAIN_RUN_DIR}/env/${SLURMD_NODENAME:-$(hostname)}.env"
    [ -f "${env_file}" ] || env_file="${LLMTRAIN_RUN_DIR}/env/cluster.env"
    [ -f "${env_file}" ] && . "${env_file}"
    # the check is the llmtrain_node package in the scripts directory, first on the path
    export PYTHONPATH="${LLMTRAIN_SCRIPTS}${PYTHONPATH:+:${PYTHONPATH}}"
    if [ "${LLMTRAIN_NETWORK_GPUS}" -gt 0 ]; then
        exec "${LLMTRAIN_PYTHON_CHECK}" -m torch.distributed.run --nnodes "${SLURM_NNODES}" \
            --nproc_per_node "${LLMTRAIN_NETWORK_PROCS}" --node_rank "${SLURM_PROCID}" \
            --master_addr "${MASTER_ADDR}" --master_port "${LLMTRAIN_NETWORK_PORT}" \
            -m llmtrain_node.network_check "$@"
    fi
    RANK=${SLURM_PROCID} WORLD_SIZE=${SLURM_NNODES} LOCAL_RANK=0 MASTER_PORT=${LLMTRAIN_NETWORK_PORT} \
        exec "${LLMTRAIN_PYTHON_CHECK}" -m llmtrain_node.network_check "$@"' network-check "${args[@]}" \
    2> "${out_dir}/${SLURM_JOB_NAME}.err"
step=$?
verdict=
if [ "${step}" -eq 0 ]; then
    verdict=$(${container_batch[@]+"${container_batch[@]}"} "${python}" -c 'import json, sys; print(json.load(open(sys.argv[1]))["verdict"])' "${out}" 2>/dev/null)
fi
case ${verdict} in
    ok) exit 0 ;;
    slow_nodes|slow_fabric) ;;
    *) why=$(grep -h '^llmtrain: network check: rank' "${out_dir}/${SLURM_JOB_NAME}.err" | head -n 1)
       [ -n "${why}" ] || why=$(tail -c 300 "${out_dir}/${SLURM_JOB_NAME}.err" | tr '\n' ' ')
       echo "llmtrain: network check: could not measure (exit ${step}): ${why}; training goes on, and its own" \
            "start-up will say whether the nodes reach each other" >&2
       exit 0 ;;
esac
case ${policy} in
    fail) echo "llmtrain: network check: below pretrain_network_min_fraction=${min_fraction} and pretrain_network_policy=fail: the job ends without training" >&2
          exit "${EXIT_NETWORK_CHECK_FAILED}" ;;
    exclude)
        if [ "${verdict}" = slow_nodes ]; then
            # shellcheck source=bad_nodes.sh
            . "${scripts}/bad_nodes.sh" || exit "${EXIT_FAILED}"
            requeue_without_bad_nodes "network check" exclude "${restart}" "${requeue_max}"
            [ $? -eq "${EXIT_REQUEUED_HELD}" ] && exit "${EXIT_REQUEUED_HELD}"
        fi
        echo "llmtrain: network check: training goes on" ;;
    *) echo "llmtrain: network check: training goes on (pretrain_network_policy=warn)" ;;
esac
exit 0
