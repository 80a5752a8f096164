#!/usr/bin/env bash
# make test's quick suite timed in one process and in a worker a core (pytest-xdist), in turn, ROUNDS times each, on
# this tree's .venv: a line each, wall and CPU seconds, to experiments/tests/logs/ (or $LOG).
#   bash experiments/tests/time_suites.sh            # 2 rounds
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
LOG=${LOG:-experiments/tests/logs/quick_suite_xdist_$(hostname -s)_$(date -u +%Y%m%d).txt}
echo "# $(git rev-parse --short HEAD), $(nproc) cores, $(date -u +%FT%TZ): the quick suite (pytest -m 'not slow'), in turn" >> "$LOG"
for round in $(seq "$ROUNDS"); do
    for how in "one process:" "xdist, -n auto --maxprocesses 4:-n auto --maxprocesses 4"; do
        name=${how%%:*} args=${how#*:}
        # shellcheck disable=SC2086
        /usr/bin/time -f "%e %U %S" -o /tmp/suite_time .venv/bin/python -m pytest -q -p no:cacheprovider $args \
            > /tmp/suite_out 2>&1 || { tail -5 /tmp/suite_out; exit 1; }
        read -r wall user sys < /tmp/suite_time
        echo "round $round, $name: $(tail -1 /tmp/suite_out | sed 's/=//g'); wall $wall s, user $user s, sys $sys s" | tee -a "$LOG"
    done
done
