#!/bin/bash
# How long creating a communicator takes as ranks grow, on this one machine: N ranks on forced
# hosts of K ranks each (TPF_NODE_ID per rank; UCX over loopback TCP between "hosts"), read from
# `tpf bench`'s "communicator created in" line (the slowest rank). K = N: one host (shared memory
# only). Oversubscribed far beyond the cores: the times show what scales with N, not a cluster's.
#
#   bench/net/setup_scale.sh [K] [N ...]     # default: K = 1, N = 32 64 128
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tpf=${TPF:-$here/build/tpf}
per_host=${1:-1}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(32 64 128)
wrapper=$(mktemp /tmp/setup_scale.XXXXXX)
trap 'rm -f "$wrapper"' EXIT
cat > "$wrapper" <<WRAP
#!/bin/sh
export TPF_NODE_ID=h\$((TPF_RANK / $per_host)) UCX_NET_DEVICES=lo
exec "\$@"
WRAP
chmod +x "$wrapper"
echo "# ranks  per_host  created_ms (slowest rank)"
for n in "${sizes[@]}"; do
  ms=$("$tpf" run -n "$n" --job-timeout 600 -- "$wrapper" "$tpf" bench barrier -n 1 -w 0 2>/dev/null |
       awk '/communicator created in/ {print $5; exit}')
  printf "%7d  %8d  %s\n" "$n" "$per_host" "${ms:-failed}"
done
