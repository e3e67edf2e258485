#!/usr/bin/env bash
# Builds local stand-ins, from Debian's packages, for the images that
# docker-compose.yml and the Dockerfile name, under the same name:tag, for a
# machine that reaches no image registry (see README.md beside this file). Only
# an image that "docker image inspect" does not find is built: a second run does
# nothing. Needs a running engine ("engine.sh ensure") and debootstrap.
#
#   standins.sh            build what is missing, one line per image
#   STOCKGUARD_COMPOSE_CACHE=DIR standins.sh    keep the base rootfs there
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${STOCKGUARD_COMPOSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stockguard-compose}"
ROOTFS="$CACHE/rootfs"
TARBALL="$CACHE/bookworm.tar"
BASE="stockguard-standin/bookworm:base"
SUITE=bookworm

# image  directory under standins/
IMAGES=(
	"golang:1.26-bookworm golang"
	"redis:7 redis"
	"postgres:15 postgres"
	"nginx:1.27 nginx"
	"prom/prometheus:v2.53.3 prometheus"
	"nats:2.10-alpine nats"
)

export DOCKER_BUILDKIT=0 # the legacy builder: BuildKit wants images from a registry

log() { printf 'standins.sh: %s\n' "$*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
report() { printf '%-26s %-8s %4ss\n' "$1" "$2" "$3"; }

# This machine's apt sources as one-line entries, "deb URI SUITE COMPONENTS...",
# from /etc/apt/sources.list and sources.list.d/*.list|*.sources (deb822), options
# such as signed-by dropped.
apt_sources() {
	local f files=()
	[ -f /etc/apt/sources.list ] && files+=(/etc/apt/sources.list)
	for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && files+=("$f")
	done
	[ "${#files[@]}" -gt 0 ] || return 0
	local f2
	for f2 in "${files[@]}"; do
		case "$f2" in
		*.sources)
			awk '
				function flush(   i, j, nu, ns, u, s) {
					if (types ~ /(^| )deb( |$)/ && enabled != "no") {
						nu = split(uris, u, " "); ns = split(suites, s, " ")
						for (i = 1; i <= nu; i++) for (j = 1; j <= ns; j++)
							print "deb", u[i], s[j], comps
					}
					types = uris = suites = comps = ""; enabled = ""
				}
				/^[ \t]*#/ { next }
				/^[ \t]*$/ { flush(); next }
				{
					key = tolower($1); sub(/:$/, "", key)
					val = $0; sub(/^[^:]*:[ \t]*/, "", val)
					if (key == "types") types = val
					else if (key == "uris") uris = val
					else if (key == "suites") suites = val
					else if (key == "components") comps = val
					else if (key == "enabled") enabled = tolower(val)
				}
				END { flush() }' "$f2"
			;;
		*)
			sed -e 's/#.*//' -e 's/\[[^]]*\]//g' "$f2" | awk '$1 == "deb" && NF >= 4 { $1 = "deb"; print }'
			;;
		esac
	done
}

# The Debian mirror this machine installs bookworm from.
debian_mirror() {
	apt_sources | awk -v s="$SUITE" '$3 == s && $2 ~ /^https?:/ { print $2; exit }'
}

ensure_base() {
	have_image "$BASE" && return 0
	local start=$SECONDS mirror host
	mirror="$(debian_mirror)"
	[ -n "$mirror" ] || { log "no '$SUITE' entry in this machine's apt sources"; exit 1; }
	host="$(printf '%s' "$mirror" | sed -E 's|^[a-z]+://([^/]+).*|\1|')"
	mkdir -p "$CACHE"
	if [ ! -d "$ROOTFS" ]; then
		command -v debootstrap >/dev/null 2>&1 || { log "debootstrap missing: run engine.sh ensure"; exit 1; }
		log "debootstrap --variant=minbase $SUITE from $mirror"
		rm -rf "$ROOTFS.tmp"
		debootstrap --variant=minbase "$SUITE" "$ROOTFS.tmp" "$mirror" >"$CACHE/debootstrap.log" 2>&1 || {
			log "debootstrap failed; last lines of $CACHE/debootstrap.log:"
			tail -n 20 "$CACHE/debootstrap.log" >&2
			exit 1
		}
		# apt inside the stand-ins' builds (--network host) uses this machine's
		# sources on the same mirror host (bookworm, -updates, -security) and its
		# tolerance of a snapshot mirror's old Release files.
		apt_sources | awk -v h="$host" '{ u = $2; sub(/^[a-z]+:\/\//, "", u); sub(/\/.*/, "", u) } u == h' \
			| awk '!seen[$0]++' >"$ROOTFS.tmp/etc/apt/sources.list"
		[ -s "$ROOTFS.tmp/etc/apt/sources.list" ] || echo "deb $mirror $SUITE main" >"$ROOTFS.tmp/etc/apt/sources.list"
		rm -f "$ROOTFS.tmp"/etc/apt/sources.list.d/*
		cat >"$ROOTFS.tmp/etc/apt/apt.conf.d/90stockguard-standin" <<-'EOF'
			Acquire::Check-Valid-Until "false";
			Acquire::Check-Date "false";
			APT::Install-Recommends "false";
			DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
			Dir::Cache::pkgcache "";
			Dir::Cache::srcpkgcache "";
		EOF
		rm -rf "$ROOTFS.tmp"/var/cache/apt/archives/*.deb "$ROOTFS.tmp"/var/lib/apt/lists/*
		mv "$ROOTFS.tmp" "$ROOTFS"
		log "debootstrap done in $((SECONDS - start)) s"
	fi
	if [ ! -f "$TARBALL" ]; then
		tar --numeric-owner -C "$ROOTFS" -cf "$TARBALL.tmp" --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' .
		mv "$TARBALL.tmp" "$TARBALL"
	fi
	docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["bash"]' \
		"$TARBALL" "$BASE" >/dev/null
	report "$BASE" built "$((SECONDS - start))"
}

# A temporary build context for golang: the Dockerfile, this machine's Go
# toolchain and its extra CA certificates (never committed).
golang_context() {
	local ctx="$1" goroot
	command -v go >/dev/null 2>&1 || { log "golang stand-in: no go on PATH"; return 1; }
	case "$(go env GOVERSION)" in
	go1.26 | go1.26.*) ;;
	*) log "golang stand-in: this machine's Go is $(go env GOVERSION), not 1.26"; return 1 ;;
	esac
	goroot="$(go env GOROOT)"
	cp "$here/standins/golang/Dockerfile" "$ctx/"
	mkdir -p "$ctx/root/usr/local/share/ca-certificates" "$ctx/root/usr/local/go"
	cp /usr/local/share/ca-certificates/*.crt "$ctx/root/usr/local/share/ca-certificates/" 2>/dev/null || true
	tar -C "$goroot" --exclude=./pkg/obj --exclude=./test -cf - . | tar -C "$ctx/root/usr/local/go" -xf -
}

build_one() {
	local image="$1" dir="$2" start=$SECONDS ctx args=() blog
	if have_image "$image"; then
		report "$image" present 0
		return 0
	fi
	blog="$CACHE/build-$dir.log"
	ctx="$here/standins/$dir"
	if [ "$dir" = golang ]; then
		ctx="$(mktemp -d "$CACHE/golang-context.XXXXXX")"
		TMPCTX="$ctx"
		golang_context "$ctx" || return 1
		args+=(--build-arg "GOPROXY=$(go env GOPROXY)" --build-arg "GOSUMDB=$(go env GOSUMDB)")
	fi
	if ! docker build --network host --force-rm "${args[@]}" -t "$image" "$ctx" >"$blog" 2>&1; then
		log "building $image failed; last lines of $blog:"
		tail -n 30 "$blog" >&2
		return 1
	fi
	[ -z "$TMPCTX" ] || { rm -rf "$TMPCTX"; TMPCTX=; }
	report "$image" built "$((SECONDS - start))"
}

TMPCTX=
trap '[ -z "$TMPCTX" ] || rm -rf "$TMPCTX"' EXIT
docker info >/dev/null 2>&1 || { log "no Docker engine answers: run engine.sh ensure"; exit 1; }
mkdir -p "$CACHE"
need=0
for entry in "${IMAGES[@]}"; do
	have_image "${entry%% *}" || need=1
done
[ "$need" = 0 ] || ensure_base
failed=0
for entry in "${IMAGES[@]}"; do
	build_one "${entry%% *}" "${entry##* }" || failed=1
done
exit "$failed"
