#!/usr/bin/env bash
# Local S3 for development: moto's S3-compatible server on 127.0.0.1, in the background.
#
#   infra/local-s3.sh start     start it (if not running), create the bucket, print env exports
#   infra/local-s3.sh stop      stop it (all data is in memory and is lost)
#   infra/local-s3.sh status    running or not (exit 0 / 3)
#   infra/local-s3.sh env       print the env exports only
#
#   eval "$(infra/local-s3.sh start)"     # start and export in the current shell
#
# Environment (all optional):
#   SNAPSTORE_S3_PORT     port (default 5555)
#   SNAPSTORE_S3_HOST     bind address (default 127.0.0.1; keep it local: no auth is enforced)
#   SNAPSTORE_S3_BUCKET   bucket created at start (default snapstore-dev)
#   SNAPSTORE_S3_STATE    directory for the pid and log files (default ${TMPDIR:-/tmp}/snapstore-local-s3-PORT)
#   SNAPSTORE_PYTHON      Python interpreter that has moto[server] and boto3 (the project's test extras);
#                         default: $VIRTUAL_ENV/bin/python, ./.venv/bin/python, python3, python
#
# Needs only `pip install -e '.[test]'` (moto[server] + boto3): no Docker, no AWS CLI.
# Exports go to stdout, messages to stderr, so `eval "$(...)"` works.
set -euo pipefail

PORT="${SNAPSTORE_S3_PORT:-5555}"
HOST="${SNAPSTORE_S3_HOST:-127.0.0.1}"
BUCKET="${SNAPSTORE_S3_BUCKET:-snapstore-dev}"
STATE="${SNAPSTORE_S3_STATE:-${TMPDIR:-/tmp}/snapstore-local-s3-${PORT}}"
PIDFILE="$STATE/moto.pid"
LOGFILE="$STATE/moto.log"
ENDPOINT="http://${HOST}:${PORT}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf '%s\n' "$*" >&2; }
die() { say "local-s3: $*"; exit 1; }

find_python() {
  local c
  for c in "${SNAPSTORE_PYTHON:-}" "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "$REPO_ROOT/.venv/bin/python" python3 python; do
    [ -n "$c" ] || continue
    command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
    if "$c" -c 'import moto.server, boto3' >/dev/null 2>&1; then
      printf '%s\n' "$c"
      return 0
    fi
  done
  return 1
}

running_pid() {
  # Print the pid if our server is running (pid file present and the process alive), else fail.
  [ -f "$PIDFILE" ] || return 1
  local pid
  pid="$(cat "$PIDFILE" 2>/dev/null || true)"
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  printf '%s\n' "$pid"
}

print_env() {
  cat <<EOF
export AWS_ENDPOINT_URL=${ENDPOINT}
export AWS_ENDPOINT_URL_S3=${ENDPOINT}
export AWS_ACCESS_KEY_ID=testing
export AWS_SECRET_ACCESS_KEY=testing
export AWS_DEFAULT_REGION=us-east-1
export AWS_REGION=us-east-1
unset AWS_PROFILE AWS_SESSION_TOKEN
export SNAPSTORE_URL='s3://${BUCKET}/dev?addressing_style=path'
EOF
}

create_bucket() {
  # Wait until the server answers, then create the bucket (idempotent).
  "$1" - "$ENDPOINT" "$BUCKET" <<'PY'
import sys, time
import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ConnectionClosedError

endpoint, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                  aws_access_key_id="testing", aws_secret_access_key="testing",
                  config=Config(retries={"max_attempts": 0}, connect_timeout=1, read_timeout=5,
                                s3={"addressing_style": "path"}))
deadline = time.time() + 20
while True:
    try:
        s3.create_bucket(Bucket=bucket)
        break
    except ClientError as e:
        if e.response["Error"]["Code"] in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            break
        raise SystemExit(f"local-s3: cannot create bucket {bucket}: {e}")
    except (EndpointConnectionError, ConnectionClosedError):
        if time.time() > deadline:
            raise SystemExit(f"local-s3: server at {endpoint} did not come up")
        time.sleep(0.1)
PY
}

cmd_start() {
  local py pid
  py="$(find_python)" || die "no Python with moto[server] and boto3 found; pip install -e '.[test]' or set SNAPSTORE_PYTHON"
  if pid="$(running_pid)"; then
    say "local-s3: already running (pid $pid) at $ENDPOINT"
  else
    mkdir -p "$STATE"
    if "$py" - "$HOST" "$PORT" <<'PY'
import socket, sys
s = socket.socket()
try:
    s.settimeout(0.5)
    sys.exit(0 if s.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0 else 1)
finally:
    s.close()
PY
    then
      die "port $PORT on $HOST is already in use by another process; set SNAPSTORE_S3_PORT"
    fi
    say "local-s3: starting moto S3 at $ENDPOINT (log: $LOGFILE)"
    nohup "$py" -m moto.server -H "$HOST" -p "$PORT" </dev/null >"$LOGFILE" 2>&1 &
    pid=$!
    printf '%s\n' "$pid" >"$PIDFILE"
    sleep 0.2
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PIDFILE"
      tail -n 20 "$LOGFILE" >&2 || true
      die "moto server exited at start"
    fi
  fi
  if ! create_bucket "$py"; then
    tail -n 20 "$LOGFILE" >&2 || true
    die "server not usable"
  fi
  say "local-s3: bucket '$BUCKET' ready; export these (or: eval \"\$($0 env)\"):"
  print_env
}

cmd_stop() {
  local pid i
  if ! pid="$(running_pid)"; then
    rm -f "$PIDFILE"
    say "local-s3: not running"
    return 0
  fi
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "local-s3: pid $pid did not exit on TERM; sending KILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE" "$LOGFILE"
  rmdir "$STATE" 2>/dev/null || true
  say "local-s3: stopped (pid $pid)"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    say "local-s3: running (pid $pid) at $ENDPOINT, bucket '$BUCKET'"
    return 0
  fi
  say "local-s3: not running"
  return 3
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) print_env ;;
  restart) cmd_stop; cmd_start ;;
  *) say "usage: $0 start|stop|status|env|restart"; exit 2 ;;
esac
