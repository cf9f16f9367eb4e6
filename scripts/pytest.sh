#!/usr/bin/env bash
# Run pytest from the project venv; "no tests collected" (exit 5) is a failure, never a pass.
# The 20 slowest tests are listed at the end: where CI's time goes is read off its log.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest --durations=20 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating as failure" >&2
  exit 1
fi
exit "$rc"
