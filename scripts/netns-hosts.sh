#!/usr/bin/env bash
# Several "hosts" on one machine for real multi-host MPI: one network namespace per host (daemon-TAG-0..N-1),
# each with a veth into a bridge (namespace daemon-TAG-br), addresses 10.99.0.1..N, and an mpirun "rsh agent" that
# starts Open MPI's orted inside the namespace of the host it is asked for. Ranks then talk TCP across the veths.
# Used by tests/mpi (--case netns) and scripts/bench.sh. Needs root and iproute2 (scripts/install-deps.sh).
#
#   scripts/netns-hosts.sh up TAG N DIR   create; writes DIR/hostfile, DIR/agent and DIR/mpirun (the launch prefix:
#                                         `$(cat DIR/mpirun) -np N prog` runs one rank per namespace over TCP)
#   scripts/netns-hosts.sh down TAG N     remove the namespaces (and with them the veths and the bridge)
# `up` exits 77 with one line saying why when network namespaces cannot be made here (not root, no iproute2, a
# container without CAP_SYS_ADMIN or without veth/bridge support), after removing what it made.
set -euo pipefail
cmd=${1:-}; tag=${2:-}; n=${3:-}
if [ -z "$cmd" ] || [ -z "$tag" ] || [ -z "$n" ]; then
  echo "usage: $0 up TAG N DIR | down TAG N" >&2
  exit 2
fi
ns() { echo "daemon-$tag-$1"; }

down() {
  for ((i = 0; i < n; i++)); do ip netns del "$(ns "$i")" 2>/dev/null || true; done
  ip netns del "$(ns br)" 2>/dev/null || true
}

if [ "$cmd" = down ]; then
  down
  exit 0
fi
[ "$cmd" = up ] || { echo "$0: unknown command '$cmd'" >&2; exit 2; }
dir=${4:?DIR}
skip() {
  echo "netns-hosts: cannot make network namespaces here: $*" >&2
  down
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null || skip "no 'ip' (install iproute2)"
ip netns add "$(ns br)" 2>/dev/null || skip "'ip netns add' failed (no CAP_SYS_ADMIN, or /run/netns not writable)"
ip -n "$(ns br)" link add br0 type bridge 2>/dev/null || skip "no bridge support in this kernel"
ip -n "$(ns br)" link set br0 up
ip -n "$(ns br)" link set lo up
mkdir -p "$dir"
: >"$dir/hostfile"
for ((i = 0; i < n; i++)); do
  h=$(ns "$i")
  ip netns add "$h" || skip "'ip netns add $h' failed"
  # Names are per namespace; the short ones below only have to be unique for a moment in this one.
  ip link add "fsh$$x$i" type veth peer name "fsb$$x$i" 2>/dev/null || skip "no veth support"
  ip link set "fsh$$x$i" netns "$h"
  ip link set "fsb$$x$i" netns "$(ns br)"
  ip -n "$h" link set "fsh$$x$i" name eth0
  ip -n "$h" addr add "10.99.0.$((i + 1))/24" dev eth0
  ip -n "$h" link set eth0 up
  ip -n "$h" link set lo up
  ip -n "$(ns br)" link set "fsb$$x$i" master br0
  ip -n "$(ns br)" link set "fsb$$x$i" up
  echo "10.99.0.$((i + 1)) slots=1" >>"$dir/hostfile"
done
# mpirun asks the agent to run orted "on" a host address: run it in that host's namespace instead of over ssh.
cat >"$dir/agent" <<EOF
#!/bin/sh
# mpirun rsh agent for the namespaces of scripts/netns-hosts.sh: HOST COMMAND... -> COMMAND in HOST's namespace.
host=\$1; shift
case "\$host" in
  10.99.0.*) i=\$((\${host##*.} - 1)) ;;
  *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
# The hosts share /tmp and a host name: each orted gets a session directory of its own, or they race for one.
mkdir -p "$dir/tmp\$i"
exec ip netns exec daemon-$tag-\$i env OMPI_MCA_orte_tmpdir_base="$dir/tmp\$i" sh -c "\$*"
EOF
chmod +x "$dir/agent"
# Every rank is alone on its "host": no binding, no shared-memory transport, TCP on the veths only; the "hosts"
# share this machine's cores, so idle ranks yield them (Open MPI cannot see the oversubscription).
printf '%s\n' ip netns exec "$(ns 0)" mpirun --allow-run-as-root --bind-to none --hostfile "$dir/hostfile" \
  --mca plm_rsh_agent "$dir/agent" --mca btl tcp,self --mca btl_tcp_if_include 10.99.0.0/24 \
  --mca oob_tcp_if_include 10.99.0.0/24 --mca mpi_yield_when_idle 1 >"$dir/mpirun"
echo "netns-hosts: $n hosts daemon-$tag-0..$((n - 1)) (10.99.0.1..$n) on bridge namespace daemon-$tag-br"
