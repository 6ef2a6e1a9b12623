#!/usr/bin/env bash
# Smoke test of a space-k8s binary: starts its etcd and kube-apiserver on free loopback
# ports in a scratch directory and waits for /readyz to answer "ok". On failure prints
# why (the apiserver's last log lines) and exits 1.   Usage: k8s-smoke.sh <binary>
set -euo pipefail
bin="$1"
dir=$(mktemp -d /tmp/space-k8s-smoke.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd=$(port) peer=$(port) api=$(port)
openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
echo 'smoke-token,admin,admin-uid,"system:masters"' > "$dir/tokens.csv"
"$bin" etcd --data-dir "$dir/etcd" --listen-client "http://127.0.0.1:$etcd" --listen-peer "http://127.0.0.1:$peer" >"$dir/etcd.log" 2>&1 &
pids+=($!)
"$bin" apiserver --etcd-servers="http://127.0.0.1:$etcd" --secure-port="$api" --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 --cert-dir="$dir/certs" --token-auth-file="$dir/tokens.csv" \
  --authorization-mode=RBAC --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$dir/sa.pub" --service-account-signing-key-file="$dir/sa.key" \
  --service-cluster-ip-range=10.250.0.0/24 --endpoint-reconciler-type=none >"$dir/apiserver.log" 2>&1 &
apid=$!
pids+=($apid)
for _ in $(seq 1 240); do
  if ! kill -0 "$apid" 2>/dev/null; then
    echo "kube-apiserver exited before it was ready:"
    grep -m1 -A12 -E '^panic|^F[0-9]{4} ' "$dir/apiserver.log" || tail -15 "$dir/apiserver.log"
    exit 1
  fi
  if [[ "$(curl -sk -H 'Authorization: Bearer smoke-token' "https://127.0.0.1:$api/readyz" 2>/dev/null)" == ok ]]; then
    echo "kube-apiserver ready"; exit 0
  fi
  sleep 0.5
done
echo "kube-apiserver not ready within 120 s:"; tail -15 "$dir/apiserver.log"; exit 1
