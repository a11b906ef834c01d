#!/bin/sh
# A remote shell for mpirun across emulated hosts (bench/peers/emulated.py): `netns_rsh.sh HOST
# COMMAND...` runs COMMAND as ssh would, through a shell, in the network namespace named HOST,
# with HOST as its hostname (a UTS namespace of its own). Open MPI names its shared-memory (vader)
# segments after the hostname and the local rank: with the machine's one hostname its ranks
# crashed at 8 ranks on 4 emulated hosts (most likely opening another host's segments; inferred,
# not traced), and with a hostname per host they run.
ns=$1
shift
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$ns" "$*"
