#!/usr/bin/env bash
# Serves a classroom: N replicas of the app behind Debian's nginx, on one port.
#
#   bash scripts/serve.sh [--replicas N] [--port PORT] [--address ADDRESS] [--run-dir DIR]
#
# Each replica is a `streamlit run app.py` (through ui.server.launch, which loads the model at once) on
# loopback (ports PORT+1 .. PORT+N); nginx listens on ADDRESS:PORT (default 0.0.0.0:8500, the
# room's network), proxies the websocket, and keeps each visitor on one replica by a cookie (a
# room behind one NAT address shares an IP, so an IP hash would put everyone on one replica). A replica that stops loses only its own visitors'
# sessions: nginx sends them to another, where the page says their view was reset.
# Ctrl-C stops everything. Logs and the generated nginx.conf are in DIR (default .serve/).
set -euo pipefail
cd "$(dirname "$0")/.."

replicas=2
port=8500
address=0.0.0.0
run="$PWD/.serve"
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --address) address="$2"; shift 2 ;;
    --run-dir) run="$(realpath -m "$2")"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$replicas" in ''|*[!0-9]*|0) echo "--replicas takes a whole number from 1" >&2; exit 2 ;; esac

if ! command -v nginx >/dev/null && [ -x /usr/sbin/nginx ]; then PATH="$PATH:/usr/sbin"; fi
if ! command -v nginx >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -q nginx-light >/dev/null
  else
    echo "nginx is missing: install it with 'sudo apt-get install -y nginx-light'" >&2; exit 1
  fi
fi
bash scripts/install.sh  # only when .venv lacks these requirements

healthy() { .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" 2>/dev/null; }

mkdir -p "$run/tmp"
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap stop EXIT
trap 'exit 130' INT TERM

# What nginx tells the replicas alone: the visitor's address it appends to X-Forwarded-For is trusted only on a
# request carrying this token (another program on this machine reaching a replica directly cannot claim an address).
proxy_token="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
start_replica() {  # replica k on port PORT+k; its name (replica-k) is all the visitors' cookie says of it
  TRANSFORMER_EXPLORER_PROXY_TOKEN="$proxy_token" TRANSFORMER_EXPLORER_REPLICA="replica-$1" .venv/bin/python -m ui.server.launch --server.port "$((port + $1))" \
    --server.address 127.0.0.1 >>"$run/replica-$1.log" 2>&1 &
  pids[$(($1 - 1))]=$!
}
servers=""
names=""
for k in $(seq 1 "$replicas"); do
  : >"$run/replica-$k.log"
  start_replica "$k"
  servers="$servers    server 127.0.0.1:$((port + k)) max_fails=1 fail_timeout=10s;
"
  names="$names    127.0.0.1:$((port + k)) replica-$k;
"
done
for k in $(seq 1 "$replicas"); do
  for _ in $(seq 1 240); do
    healthy "http://127.0.0.1:$((port + k))/_stcore/health" && break
    kill -0 "${pids[$((k - 1))]}" 2>/dev/null || { echo "replica $k did not start: see $run/replica-$k.log" >&2; exit 1; }
    sleep 0.5
  done
done

# Streamlit's page tries <page>/_stcore/health before /_stcore/health when opened by a page's URL
# (streamlit/streamlit#7074); naming the app's root in the page spares those 404s.
# Not to be framed by another site (clickjacking), nor content sniffed, nor the page's address sent elsewhere.
security_headers='    add_header X-Frame-Options SAMEORIGIN always;
    add_header Content-Security-Policy "frame-ancestors '"'self'"'" always;
    add_header X-Content-Type-Options nosniff always;
    add_header Referrer-Policy same-origin always;'
# Set in every block that proxies: a block with a proxy_set_header of its own inherits none of the server's, and the
# websocket's request is the one whose headers the app reads.
forwarded="    proxy_set_header Host \$host;
    proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    proxy_set_header X-Explorer-Proxy $proxy_token;"
cat >"$run/nginx.conf" <<EOF
worker_processes auto;
pid $run/nginx.pid;
error_log $run/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $run/tmp/body;
  proxy_temp_path $run/tmp/proxy;
  fastcgi_temp_path $run/tmp/fastcgi;
  uwsgi_temp_path $run/tmp/uwsgi;
  scgi_temp_path $run/tmp/scgi;
  client_max_body_size 200m;  # the app's largest upload (server.maxUploadSize)
  proxy_buffers 64 16k;  # the app's largest script (Plotly, about 1 MB) in memory, not a temporary file

  map \$http_upgrade \$connection_upgrade { default upgrade; "" close; }
  # The replica that answered (the last address after a retry), by name: the cookie names no internal address.
  map \$upstream_addr \$upstream_last { "~(?<last>[^ ,]+)\$" \$last; default ""; }
  map \$upstream_last \$replica_name {
$names    default "";
  }
  # A visitor's key: their te_visitor cookie, or, on a first request, a fresh one that is set.
  map \$cookie_te_visitor \$visitor { "" \$request_id; default \$cookie_te_visitor; }
  map \$cookie_te_visitor \$new_visitor { "" "te_visitor=\$request_id; Path=/; HttpOnly; SameSite=Lax"; default ""; }

  upstream replicas {
    hash \$visitor consistent;  # the same visitor, the same replica, while it is up
$servers  }

  server_tokens off;
  server {
    listen $address:$port;
    add_header Set-Cookie \$new_visitor always;
$security_headers
    proxy_http_version 1.1;
$forwarded
    proxy_next_upstream error timeout http_502 http_503;  # a stopped replica: try the next one

    location / {
      proxy_pass http://replicas;  # each page names the app's root itself (ui/server/asgi.py)
    }
    location = /_stcore/metrics { return 404; }  # the server's own counters are not the room's to read
    location = /_stcore/stream {
      proxy_pass http://replicas;
$forwarded
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection \$connection_upgrade;
      proxy_read_timeout 1h;
      # The replica that holds this session: a new session elsewhere reads it and says the view was reset.
      add_header Set-Cookie "te_replica=\$replica_name; Path=/; HttpOnly; SameSite=Lax" always;
$security_headers
    }
  }
}
EOF
nginx -p "$run" -c "$run/nginx.conf" -g 'daemon off;' &
nginx_pid=$!
pids+=("$nginx_pid")
for _ in $(seq 1 40); do healthy "http://127.0.0.1:$port/_stcore/health" && break; sleep 0.25; done
shown=$([ "$address" = 0.0.0.0 ] && hostname -I 2>/dev/null | awk '{print $1}' || echo "$address")
echo "Serving $replicas replicas at http://${shown:-localhost}:$port (Ctrl-C stops them)"

# A replica that stops is started again (its visitors meanwhile move to the others, told their view was reset),
# up to MAX_RESTARTS times each: one that keeps failing is left down, and said so.
MAX_RESTARTS=5
declare -A restarts
while kill -0 "$nginx_pid" 2>/dev/null; do
  for k in $(seq 1 "$replicas"); do
    pid="${pids[$((k - 1))]}"
    if [ "$pid" != down ] && ! kill -0 "$pid" 2>/dev/null; then
      restarts[$k]=$((${restarts[$k]:-0} + 1))
      if [ "${restarts[$k]}" -le "$MAX_RESTARTS" ]; then
        echo "replica $k (port $((port + k))) stopped: its visitors move to the others; starting it again" \
          "(restart ${restarts[$k]} of $MAX_RESTARTS; see $run/replica-$k.log)" >&2
        start_replica "$k"
      else
        echo "replica $k stopped $MAX_RESTARTS times: left down, the others serve its visitors; see" \
          "$run/replica-$k.log" >&2
        pids[$((k - 1))]=down
      fi
    fi
  done
  sleep 2
done
