#!/usr/bin/env bash
# Starts (or stops) a Docker engine for the kind suite when none is running, on the project's
# terms: bridges in 198.18.0.0/15 only (no private range), and the runc wrapper of
# tools/cmd/runc-nosysresource as the default runtime, so privileged containers (kind's nodes)
# run on a machine whose capability bounding set lacks CAP_SYS_RESOURCE.
#
#   tools/kindnode/dockerd.sh start   # installs docker.io with apt when dockerd is missing
#   tools/kindnode/dockerd.sh stop    # stops only a dockerd this script started
#   tools/kindnode/dockerd.sh status
#
# State (pid file, log, the wrapper) is in $DOCKERD_STATE (default /run/reserved-ips-dockerd).
set -euo pipefail
cd "$(dirname "$0")/../.."
state=${DOCKERD_STATE:-/run/reserved-ips-dockerd}
pidfile=$state/dockerd.pid

usable() { timeout 10 docker info >/dev/null 2>&1; }

# drop_stale_bridges deletes the bridges in 198.18.0.0/15 (br-<network id>) that belong to no
# network of the running engine: left in the kernel by an engine that is gone (killed, or its
# store moved away), such a bridge keeps its address and route, and a new network given the same
# subnet is then unreachable from the host (two routes, the stale one first).
drop_stale_bridges() {
	command -v ip >/dev/null || return 0
	local ids dev
	ids=$(docker network ls --no-trunc -q) || return 0
	for dev in $(ip -o -4 addr show | awk '$2 ~ /^br-/ && $4 ~ /^198\.1[89]\./ {print $2}' | sort -u); do
		if ! grep -q "^${dev#br-}" <<<"$ids"; then
			echo "dockerd.sh: deleting the stale bridge $dev (no network of this engine; its subnet is ours)"
			ip link del "$dev" || echo "dockerd.sh: could not delete $dev" >&2
		fi
	done
}

case "${1:-}" in
start)
	if usable; then
		echo "dockerd.sh: a Docker engine is already running; using it"
		drop_stale_bridges
		exit 0
	fi
	if ! command -v dockerd >/dev/null; then
		echo "dockerd.sh: installing docker.io"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
	fi
	mkdir -p "$state"
	(cd tools && go build -o "$state/runc-nosysresource" ./cmd/runc-nosysresource)
	echo "dockerd.sh: starting dockerd (log: $state/dockerd.log)"
	setsid dockerd \
		--pidfile "$pidfile" \
		--bip 198.18.0.1/24 \
		--default-address-pool base=198.18.128.0/17,size=24 \
		--add-runtime "nosysresource=$state/runc-nosysresource" \
		--default-runtime nosysresource \
		--storage-driver overlay2 \
		--exec-opt native.cgroupdriver=cgroupfs \
		>"$state/dockerd.log" 2>&1 </dev/null &
	echo $! >"$state/started"
	for _ in $(seq 60); do
		if usable; then
			echo "dockerd.sh: dockerd is up (pid $(cat "$state/started"))"
			drop_stale_bridges
			exit 0
		fi
		sleep 1
	done
	echo "dockerd.sh: dockerd did not come up; its log:" >&2
	tail -20 "$state/dockerd.log" >&2
	exit 1
	;;
stop)
	if [ ! -e "$state/started" ]; then
		echo "dockerd.sh: no dockerd started by this script"
		exit 0
	fi
	pid=$(cat "$state/started")
	if kill -0 "$pid" 2>/dev/null; then
		# The kind clusters and containers it runs go with it; dockerd stops its containerd.
		kill -TERM "$pid"
		for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
		if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
	fi
	rm -f "$state/started"
	echo "dockerd.sh: dockerd stopped"
	;;
status)
	if usable; then echo running; else echo "not running"; exit 1; fi
	;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
