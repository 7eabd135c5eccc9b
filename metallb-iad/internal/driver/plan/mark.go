package plan

import "time"

// MetallbMark is what the planners know of MetalLB's progress.
type MetallbMark struct {
	// Passed is the latest touch of a placeholder MetalLB served (zero: none seen).
	Passed time.Time
	// MovedAt is when passed last moved on (zero: never).
	MovedAt time.Time
}
