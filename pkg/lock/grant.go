package lock

// Grant is what a caller holds while its function runs: the resources and, for
// each, a fencing token larger than any issued before for that resource. Pass the
// token with every write the lock protects, and have the store refuse a write whose
// token is older than one it has already accepted.
type Grant struct {
	names   []string
	tokens  []int64
	leaseOf []*lease // per name; one multi-resource lease may appear several times
	waited  bool
	handoff bool // every lease came from the previous local holder
	yield   bool
}

// Names returns the resources of the grant, sorted and without duplicates.
func (g *Grant) Names() []string { return g.names }

// Token returns the fencing token of name, or 0 when name is not in the grant.
func (g *Grant) Token(name string) int64 {
	for i, n := range g.names {
		if n == name {
			return g.tokens[i]
		}
	}
	return 0
}
