package lock

import (
	"fmt"
	"slices"
)

// normalize sorts and de-duplicates names: sorted acquisition is what keeps two
// multi-resource callers from deadlocking. An empty name is refused for every
// Backend, and a name the Backend cannot lease when it is a NameChecker.
func normalize(names []string, b Backend) ([]string, error) {
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no names", ErrInvalidName)
	}
	out := slices.Clone(names)
	slices.Sort(out)
	out = slices.Compact(out)
	check, _ := b.(NameChecker)
	for _, n := range out {
		if n == "" {
			return nil, fmt.Errorf("%w: %q", ErrInvalidName, n)
		}
		if check != nil {
			if err := check.CheckName(n); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}
