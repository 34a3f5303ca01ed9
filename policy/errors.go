package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Error is one problem in a policy file, where it is: the file, the line
// and column (from 1) of the offending value, and the path of the field,
// such as rules[2].guards[0].rate ("" for the document itself). A plain
// value that nothing changes once Decode returns it, so safe to read
// from several goroutines; the zero Error is at line 0 of no file.
type Error struct {
	File   string
	Line   int
	Column int
	Path   string
	Msg    string
}

// Error formats e as file:line:column: path: message.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors are all the problems of a policy file, in the order of the file.
// Decode returns them as its error; find them with errors.As. The
// zero value, nil, holds none.
type Errors []*Error

// Error lists every error, one a line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

func (es Errors) sort() {
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Column < es[j].Column
	})
}
