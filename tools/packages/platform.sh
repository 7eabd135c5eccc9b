#!/bin/sh
# Assembles a platform chart with the reserved-IP addresses in it, as a pull request to Cozystack
# adds them to packages/core/platform there: copies the platform chart CHART (Cozystack's own,
# or the stand-in tools/charts/testdata/platform) to DEST, which must not exist yet, adds this
# repository's PackageSources (packages/core/platform/sources/*.yaml) to its sources/ and its
# helm-unittest suites (packages/core/platform/tests/*_test.yaml) to its tests/, and inserts the
# lines of packages/core/platform/bundles/system-entry.yaml into its templates/bundles/system.yaml
# at the end of the bundle's inline list of optional system packages: just before the `{{- end }}`
# that closes the bundle's bundles.system.enabled block, which is the file's last line. That is
# where tools/charts/platform_test.go puts the entry in the stand-in too (its OPTIONAL marker is
# the line before that `{{- end }}`).
#
# usage: platform.sh CHART DEST
set -eu

if [ "$#" -ne 2 ]; then
	echo "usage: $0 CHART DEST" >&2
	exit 2
fi
chart="$1"
dest="$2"
ours="$(cd "$(dirname "$0")/../.." && pwd)/packages/core/platform"
bundle="$dest/templates/bundles/system.yaml"

fail() {
	echo "platform.sh: $*" >&2
	exit 1
}

[ -f "$chart/Chart.yaml" ] || fail "$chart holds no Chart.yaml"
[ -f "$chart/templates/bundles/system.yaml" ] || fail "$chart holds no templates/bundles/system.yaml"
[ -f "$ours/bundles/system-entry.yaml" ] || fail "no $ours/bundles/system-entry.yaml"
[ ! -e "$dest" ] || fail "$dest exists already"
mkdir -p "$(dirname "$dest")"
cp -R "$chart" "$dest"

# A file of the same name in the platform would be overwritten silently: refuse it instead (a
# PackageSource or a suite of Cozystack's own under one of our names is a clash the pull request
# would have to resolve).
mkdir -p "$dest/sources" "$dest/tests"
for f in "$ours"/sources/*.yaml "$ours"/tests/*_test.yaml; do
	[ -f "$f" ] || fail "no $f"
	to="$dest/$(basename "$(dirname "$f")")/$(basename "$f")"
	[ ! -e "$to" ] || fail "the platform has $to already"
	cp "$f" "$to"
done

# The bundle's shape: everything inside one bundles.system.enabled block, closed on its last line,
# with the list of optional packages before it. Anything else means the platform changed and the
# place of the entry has to be looked at again.
grep -q '^{{- if .Values.bundles.system.enabled }}$' "$bundle" ||
	fail "$bundle has no '{{- if .Values.bundles.system.enabled }}' block"
grep -q '^# Optional System Packages' "$bundle" ||
	fail "$bundle has no '# Optional System Packages' list"
[ "$(awk 'NF { last = $0 } END { print last }' "$bundle")" = '{{- end }}' ] ||
	fail "the last line of $bundle is not the '{{- end }}' of its bundles.system.enabled block"
! grep -q 'cozystack\.metallb-iad' "$bundle" || fail "$bundle names cozystack.metallb-iad already"

awk -v entry="$ours/bundles/system-entry.yaml" '
	{ line[NR] = $0 }
	NF { last = NR }
	END {
		for (i = 1; i <= NR; i++) {
			if (i == last) {
				while ((getline l < entry) > 0) print l
				close(entry)
			}
			print line[i]
		}
	}' "$bundle" >"$bundle.new"
mv "$bundle.new" "$bundle"
