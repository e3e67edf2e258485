#!/usr/bin/env bash
# make bench-micro's comparison tools: wrk (BenchmarkGeneratorVsWrk) and k6
# (BenchmarkGeneratorVsK6). In CI (CI set) a missing one is installed: wrk with
# apt-get as root, k6 with go install. Elsewhere, or when installing is not
# possible, it says on stderr which comparison will be skipped and why, so that
# a skip is never silent. Always exits 0: the benchmarks decide (they fail under
# STOCKGUARD_TEST_REQUIRE_REAL=1).
set -uo pipefail

K6_VERSION=${K6_VERSION:-v1.8.1}
GO=${GO:-go}
say() { printf 'bench-micro: %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null 2>&1; then
  if [ -n "${CI:-}" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing wrk (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq wrk >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq wrk >/dev/null; } ||
      say "installing wrk failed: BenchmarkGeneratorVsWrk will be skipped"
  else
    say "wrk is not on the PATH: BenchmarkGeneratorVsWrk (the load generator against wrk) will be skipped; install Debian's wrk package (CI=1 as root installs it)"
  fi
fi

gobin=$("$GO" env GOBIN)
[ -n "$gobin" ] || gobin="$("$GO" env GOPATH | cut -d: -f1)/bin"
if ! command -v k6 >/dev/null 2>&1 && [ ! -x "$gobin/k6" ]; then
  if [ -n "${CI:-}" ]; then
    say "installing k6 $K6_VERSION (go install go.k6.io/k6@$K6_VERSION)"
    "$GO" install "go.k6.io/k6@$K6_VERSION" || say "installing k6 failed: BenchmarkGeneratorVsK6 will be skipped"
  else
    say "k6 is neither on the PATH nor in $gobin: BenchmarkGeneratorVsK6 (the load generator against k6) will be skipped; go install go.k6.io/k6@$K6_VERSION (CI=1 installs it)"
  fi
fi
exit 0
