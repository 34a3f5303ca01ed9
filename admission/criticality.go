package admission

// Criticality is how much a call matters when a server must refuse some:
// lower classes are refused first. The classes and their names are those
// of the Google SRE book ("Handling Overload"); the zero value is Critical,
// the class of a call that claims none.
type Criticality int8

// The classes, from the first refused to the last.
const (
	// Sheddable: work whose loss costs little (batch jobs, prefetches);
	// refused first.
	Sheddable Criticality = -2
	// SheddablePlus: work that may be partly lost and retried later.
	SheddablePlus Criticality = -1
	// Critical: the default class of production traffic.
	Critical Criticality = 0
	// CriticalPlus: the traffic whose loss users see most; refused last.
	CriticalPlus Criticality = 1
)

// Classes is the number of criticality classes.
const Classes = 4

// Index maps c to 0 (Sheddable) … 3 (CriticalPlus), for arrays by class;
// a value out of range maps to Critical's index.
func (c Criticality) Index() int {
	if c < Sheddable || c > CriticalPlus {
		return int(Critical - Sheddable)
	}
	return int(c - Sheddable)
}

// String returns the class's name as it travels in metadata
// ("critical_plus", "critical", "sheddable_plus", "sheddable").
func (c Criticality) String() string {
	switch c {
	case Sheddable:
		return "sheddable"
	case SheddablePlus:
		return "sheddable_plus"
	case Critical:
		return "critical"
	case CriticalPlus:
		return "critical_plus"
	}
	return "critical"
}

// ParseCriticality returns the class named s ("critical_plus", "critical",
// "sheddable_plus", "sheddable", in any case), and false for any other
// string. It does not allocate.
func ParseCriticality(s string) (Criticality, bool) {
	switch {
	case equalFold(s, "critical"):
		return Critical, true
	case equalFold(s, "sheddable"):
		return Sheddable, true
	case equalFold(s, "critical_plus"):
		return CriticalPlus, true
	case equalFold(s, "sheddable_plus"):
		return SheddablePlus, true
	}
	return Critical, false
}

// equalFold compares s with lower-case ASCII t, ignoring the case of s.
func equalFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != t[i] {
			return false
		}
	}
	return true
}
