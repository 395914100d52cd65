#!/bin/bash
# The bench's ssh/sftp/scp: one record per invocation, then the real binary.
# Linked as tests/bench's ssh, sftp and scp (ANSIBLE_SSH_EXECUTABLE and friends); the
# record is written to its own file in $TF_BENCH_OPLOG (no interleaving between forks):
# kind NUL time NUL argc NUL argv... NUL, and for sftp the batch read from stdin.
kind=${0##*/}
rec="$TF_BENCH_OPLOG/$$-${EPOCHREALTIME/./}"
printf '%s\0' "$kind" "$EPOCHREALTIME" "$#" "$@" > "$rec"
if [[ $kind == sftp ]]; then
    # sftp reads its batch ("put SRC DST" / "get SRC DST") from stdin: keep a copy.
    cat > "$rec.in"
    exec "$TF_BENCH_REAL_SSH_DIR/$kind" "$@" < "$rec.in"
fi
exec "$TF_BENCH_REAL_SSH_DIR/$kind" "$@"
