#!/bin/sh
# Stand-in for Cozystack's hack/helm-unit-tests.sh, for make test-packages and make
# test-platform-upstream, run from the root of a Cozystack-shaped tree: `make test` in every
# package directory whose Makefile has a test target, failing on a failed run, on a test target
# that make skipped, and on a run that reports no passed helm-unittest suite (helm-unittest exits 0
# when it finds no suites).
set -eu
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
ran=0
failed=""
for dir in packages/*/*; do
	[ -f "$dir/Makefile" ] || continue
	make -C "$dir" -n test >/dev/null 2>&1 || continue
	echo "Running tests in $dir"
	ran=$((ran + 1))
	rc=0
	LC_ALL=C make -C "$dir" test >"$out" 2>&1 || rc=$?
	cat "$out"
	if [ "$rc" -ne 0 ]; then
		failed="$failed $dir"
	elif grep -qE "[\`']test' is up to date" "$out"; then
		echo "ERROR: $dir: make skipped the test target (a file named test?)" >&2
		failed="$failed $dir"
	elif ! grep -qE 'Test Suites:[[:space:]]+[1-9][0-9]* passed' "$out"; then
		echo "ERROR: $dir: no helm-unittest suite passed (none under tests/*_test.yaml?)" >&2
		failed="$failed $dir"
	fi
done
if [ "$ran" -eq 0 ]; then
	echo "ERROR: no package has a test target" >&2
	exit 1
fi
if [ -n "$failed" ]; then
	echo "ERROR: tests failed in:$failed" >&2
	exit 1
fi
echo "helm-unittest: $ran packages passed"
