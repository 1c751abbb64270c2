#!/bin/sh
# Goodput and p99 against the unloaded p99 at 3x, per strategy and noise level, from
# `ratewarden simulate load` (deterministic: the same table every run). The published
# defaults with a 100 ms window, 16 workers of 100 ms. Usage: scripts/adaptive-noise-table.sh [BIN]
bin=${1:-target/release/ratewarden}
printf '%-10s %-6s %8s %14s\n' strategy noise goodput p99/unloaded
for noise in none tail heavy; do
  for strategy in gradient2 vegas aimd gradient; do
    "$bin" simulate load --workers 16 --noise "$noise" --strategy "$strategy" --defaults --window 100ms |
      awk -v s="$strategy" -v n="$noise" '
        $1 == "1" && !u { u = $10 + 0 }
        $1 == "3" && !g { g = $8; p = $10 + 0 }
        END { printf "%-10s %-6s %8s %13.2fx\n", s, n, g, p / u }'
  done
done
