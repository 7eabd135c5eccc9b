// Package plan holds the MetalLB driver's decisions, and nothing that talks to the apiserver:
// the typed class parameters, the names, labels and annotations of the driver's own Services
// and their builders, the snapshots (views) a reconciler reads, and the pure planners that turn
// a snapshot into a plan of writes and events (docs/design.md#decide-then-write). No client and
// no controller-runtime import: the linter's depguard rule keeps it so.
package plan
