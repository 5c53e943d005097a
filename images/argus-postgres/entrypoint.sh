#!/bin/sh
# argus-postgres entrypoint: initialise the data directory once (as postgres), then run the
# server in the foreground as PID 1. The interface of the official postgres image:
# POSTGRES_USER, POSTGRES_PASSWORD (required), POSTGRES_DB, POSTGRES_INITDB_ARGS, PGDATA.
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
export PGDATA POSTGRES_USER POSTGRES_DB

if [ "$(id -u)" = 0 ]; then
    # PostgreSQL refuses to run as root: own the directory (a fresh volume is root's), then
    # run this script again as postgres.
    mkdir -p "$PGDATA"
    chown postgres:postgres "$PGDATA"
    chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "argus-postgres: POSTGRES_PASSWORD is not set; give the database a password" \
            "through the environment (never in a file of the repository)" >&2
        exit 64
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    # shellcheck disable=SC2086  # POSTGRES_INITDB_ARGS is a list of flags
    initdb --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-} >/dev/null
    rm -f "$pwfile"
    printf 'host all all all scram-sha-256\n' >> "$PGDATA/pg_hba.conf"
    if [ "$POSTGRES_DB" != postgres ]; then
        echo "CREATE DATABASE \"$POSTGRES_DB\"" | postgres --single -D "$PGDATA" postgres >/dev/null
    fi
    echo "argus-postgres: initialised $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' -c port=5432 "$@"
