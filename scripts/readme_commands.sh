#!/usr/bin/env bash
# Print the README's two commands, one per line, as its "## The two commands" section holds them
# (indented by four spaces): newcomer.sh and bench/bench_suite.py run what the README says.
set -euo pipefail
readme="$(dirname "$0")/../README.md"
commands=$(awk '/^## The two commands/{on=1; next} /^## /{on=0} on && /^    [^ ]/{sub(/^    /, ""); print}' "$readme")
count=$(printf '%s' "$commands" | grep -c '' || true)
if [ "$count" -ne 2 ]; then
    echo "readme_commands: error: README.md's 'The two commands' section holds $count commands, not 2. Fix: keep exactly two indented commands there" >&2
    exit 2
fi
printf '%s\n' "$commands"
