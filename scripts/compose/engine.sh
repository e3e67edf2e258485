#!/usr/bin/env bash
# A local Docker Engine for "docker compose up" of docker-compose.yml on a machine
# with no Docker daemon and no image registry (see README.md beside this file).
#
#   engine.sh ensure    install Debian's docker.io and debootstrap when missing,
#                       Compose v2 (the CLI plugin users have, built with go
#                       install; Debian's docker-compose 1.29 if that fails) when
#                       no "docker compose" works, and start dockerd when none
#                       answers
#   engine.sh stop      stop dockerd, only if "ensure" started it
#   engine.sh compose   print the compose command to use:
#                         $(bash scripts/compose/engine.sh compose) up ...
#
# dockerd runs with --iptables=false (containers on bridge networks reach each
# other and published ports, but not the outside: builds use --network host) and
# the vfs storage driver, which works on any file system.
set -euo pipefail

CACHE="${STOCKGUARD_COMPOSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stockguard-compose}"
MARKER="$CACHE/dockerd.started-by-engine-sh"
LOG="$CACHE/dockerd.log"

log() { printf 'engine.sh: %s\n' "$*" >&2; }

# The compose command that works here, or nothing.
compose_cmd() {
	if docker compose version >/dev/null 2>&1; then
		echo "docker compose"
	elif command -v docker-compose >/dev/null 2>&1 && docker-compose version >/dev/null 2>&1; then
		echo "docker-compose"
	fi
}

engine_up() { docker info >/dev/null 2>&1; }

# Compose v2, the "docker compose" plugin that users run, is not packaged for
# bookworm; it builds from its module in about two minutes.
COMPOSE_V2="github.com/docker/compose/v2/cmd@v2.29.7"
install_compose_v2() {
	command -v go >/dev/null 2>&1 || return 1
	local plugins="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
	log "installing Compose v2 ($COMPOSE_V2) as $plugins/docker-compose"
	mkdir -p "$CACHE/bin" "$plugins"
	GOBIN="$CACHE/bin" CGO_ENABLED=0 go install -ldflags "-X github.com/docker/compose/v2/internal.Version=${COMPOSE_V2##*@}" "$COMPOSE_V2" || return 1
	install -m 0755 "$CACHE/bin/cmd" "$plugins/docker-compose"
	docker compose version >/dev/null 2>&1
}

apt_install() {
	log "installing $*"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure() {
	mkdir -p "$CACHE"
	local pkgs=()
	command -v dockerd >/dev/null 2>&1 || pkgs+=(docker.io)
	command -v debootstrap >/dev/null 2>&1 || pkgs+=(debootstrap)
	if [ "${#pkgs[@]}" -gt 0 ]; then
		apt_install "${pkgs[@]}"
	fi
	if ! docker compose version >/dev/null 2>&1 && ! install_compose_v2; then
		log "Compose v2 could not be built: Debian's docker-compose (1.29) instead"
		[ -n "$(compose_cmd)" ] || apt_install docker-compose
	fi
	command -v docker >/dev/null 2>&1 || { log "no docker CLI on PATH"; exit 1; }

	if ! engine_up; then
		# A stale socket from a dockerd that died would make the new one fail.
		if [ -S /var/run/docker.sock ] && ! pgrep -x dockerd >/dev/null 2>&1; then
			rm -f /var/run/docker.sock
		fi
		log "starting dockerd (log: $LOG)"
		# setsid: its own session, so that it outlives the shell that ran ensure.
		setsid dockerd --iptables=false --storage-driver=vfs >>"$LOG" 2>&1 </dev/null &
		local pid=$!
		printf 'pid=%s\nstarted=%s\n' "$pid" "$(date -u +%FT%TZ)" >"$MARKER"
		local i
		for i in $(seq 1 60); do
			engine_up && break
			if ! kill -0 "$pid" 2>/dev/null; then
				log "dockerd exited; last lines of $LOG:"
				tail -n 20 "$LOG" >&2
				rm -f "$MARKER"
				exit 1
			fi
			sleep 0.5
		done
		if ! engine_up; then
			log "dockerd did not answer within 30 s; last lines of $LOG:"
			tail -n 20 "$LOG" >&2
			exit 1
		fi
	fi

	# The CLI first on PATH (possibly newer than the daemon) negotiates the API
	# version down to the daemon's; say which pair is in use.
	local versions
	if ! versions="$(docker version --format 'client {{.Client.Version}} (API {{.Client.APIVersion}}), server {{.Server.Version}} (API {{.Server.APIVersion}})' 2>&1)"; then
		log "docker CLI $(command -v docker) cannot talk to the daemon: $versions"
		exit 1
	fi
	log "docker $versions"
	local compose
	compose="$(compose_cmd)"
	[ -n "$compose" ] || { log "no working docker compose / docker-compose"; exit 1; }
	log "compose: $compose"
}

stop() {
	if [ ! -f "$MARKER" ]; then
		log "dockerd was not started by this script: left alone"
		return 0
	fi
	local pid
	pid="$(sed -n 's/^pid=//p' "$MARKER")"
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
		log "stopping dockerd (pid $pid)"
		kill -TERM "$pid"
		local i
		for i in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "dockerd (pid $pid) still running after 30 s: sending SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	else
		log "dockerd from the marker (pid ${pid:-?}) is not running"
	fi
	rm -f "$MARKER"
}

case "${1:-}" in
ensure) ensure ;;
stop) stop ;;
compose)
	c="$(compose_cmd)"
	[ -n "$c" ] || { log "no working docker compose / docker-compose: run '$0 ensure'"; exit 1; }
	echo "$c"
	;;
*)
	echo "usage: $0 ensure|stop|compose" >&2
	exit 2
	;;
esac
