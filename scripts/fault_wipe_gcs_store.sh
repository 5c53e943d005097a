#!/usr/bin/env bash
# Wipe the head's GCS store: a genuinely new cluster. The head's Ray is stopped (its
# watchdog releases the store's lock), the store removed, the watchdog started again; the
# head comes back with a new cluster_id, workers rejoin, and the runs of the old cluster
# end CLUSTER_LOST and resume from their checkpoints. The head container (and a task
# service in it) keeps running.
#   local head       `argus-node local wipe-gcs-store`: the head node stopped and started
#   docker NAME      the head watchdog stopped through supervisorctl, `argus-node
#                    wipe-gcs-store --yes` with the container's own ARGUS_* settings
. "$(dirname "$0")/fault_lib.sh"
parse_target "$@"
if [ "$KIND" = local ]; then
  [ "$NAME" = head ] || die "only the node named head has a GCS store"
  "$ARGUS_NODE" local wipe-gcs-store --state-dir "$STATE_DIR" --yes
else
  [ "$(docker_role)" = head ] || die "$NAME is not a head container"
  docker exec "$NAME" supervisorctl -c "$CONF_IN_CONTAINER" stop argus_head_watchdog
  # started again whatever the wipe did: a head left stopped would be a worse fault
  status=0
  docker exec "$NAME" argus-node wipe-gcs-store --yes || status=$?
  docker exec "$NAME" supervisorctl -c "$CONF_IN_CONTAINER" start argus_head_watchdog
  [ "$status" = 0 ] || die "the wipe failed (exit $status); the head runs on its old store"
fi
echo "wiped the GCS store of $NAME: a new cluster"
