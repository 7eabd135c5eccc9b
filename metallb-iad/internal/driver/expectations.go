package driver

// The driver's expectations (d.expect: what it created or deleted, until its cache shows it) and
// its write tracker (d.written: the resourceVersion its writes left, until its cache shows them)
// are the freshness kit's (docs/design.md#the-freshness-kit); these are their keys.
func placeholderKey(claimUID, family string) string { return "placeholder/" + claimUID + "/" + family }
func addressKey(claimUID, family string) string     { return "address/" + claimUID + "/" + family }
func holdKey(address string) string                 { return "hold/" + address }
func existsKey(address string) string               { return "exists/" + address }
func deletedKey(uid string) string                  { return "deleted/" + uid }
func relabelledKey(uid string) string               { return "relabelled/" + uid }
func pinKey(svcUID string) string                   { return "pin/" + svcUID }
func attachKey(address string) string               { return "attach/" + address }
func writtenKey(address string) string              { return "written/" + address }
func serviceWrittenKey(uid string) string           { return "written-service/" + uid }
