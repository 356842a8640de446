#!/usr/bin/env bash
# Runs engine and forecast test binaries (bin/gpu/eng.tar.xz: NAME.LABEL.test
# built with `go test -c`) interleaved on a quiet lent machine, three rounds,
# each from its package directory: old and new compared on one machine.
set -u
out=${1:-bench-out}
mkdir -p "$out"
root=$(pwd)
work=$(mktemp -d)
python3 -c 'import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])' bin/gpu/eng.tar.xz "$work" || exit 1
{
  echo "== machine"; uname -a; nproc; uptime
  for r in 1 2 3; do
    for b in "$work"/eng/engine.*.test; do
      l=$(basename "$b" .test)
      (cd "$root/policy/engine" && "$b" -test.run '^$' -test.bench '^BenchmarkPlan$/^nodes=10000' -test.benchtime 10x -test.benchmem -test.cpu 2 2>&1 | grep '^Bench' | sed "s/^/r$r $l /")
    done
    for b in "$work"/eng/forecast.*.test; do
      l=$(basename "$b" .test)
      (cd "$root/forecast" && "$b" -test.run '^$' -test.bench 'Forecast/nodes=10000' -test.benchtime 3x -test.cpu 2 2>&1 | grep '^Bench' | sed "s/^/r$r $l /")
    done
  done
  uptime
} 2>&1 | tee "$out/bench.txt"
