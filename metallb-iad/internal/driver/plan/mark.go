package plan

import "time"

// MetallbMark is what the planners know of MetalLB's progress.
type MetallbMark struct {
	// passed is the latest touch of a placeholder MetalLB served (zero: none seen).
	Passed time.Time
	// movedAt is when passed last moved on (zero: never).
	MovedAt time.Time
}
