// Package nilness tells an absent value from a present one when the value
// arrives as an interface: a nil pointer (or map, slice, func, channel)
// stored in a non-nil interface is absent too, and its methods would
// panic later, on a request path or at a scrape, far from the call that
// passed it.
package nilness

import "reflect"

// Is reports whether v is nil, or an interface holding a nil pointer,
// map, slice, func, channel or interface. It uses reflection: call it
// where options are taken, not per call.
func Is(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
