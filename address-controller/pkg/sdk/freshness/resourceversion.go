package freshness

import "strconv"

// RVAtLeast reports whether resourceVersion have is want or a newer one: whether a cached copy
// already shows a write that left the object at want
// (docs/design.md#a-view-that-includes-your-own-writes). Resource versions are etcd revisions on a
// kube-apiserver; ones that do not parse as numbers are compared for equality only.
func RVAtLeast(have, want string) bool {
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	if err1 != nil || err2 != nil {
		return have == want
	}
	return h >= w
}
