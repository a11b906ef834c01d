#!/bin/sh
# A remote shell for mpirun across emulated hosts (bench/peers/emulated.py): `netns_rsh.sh HOST
# COMMAND...` runs COMMAND as ssh would, through a shell, in the network namespace named HOST.
ns=$1
shift
exec ip netns exec "$ns" /bin/sh -c "$*"
