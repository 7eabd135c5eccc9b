package plan

// testDriverNS is the driver's namespace in the planner tests, as in the driver's envtest suite.
const testDriverNS = "cozy-metallb-iad"
