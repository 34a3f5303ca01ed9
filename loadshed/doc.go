// Package loadshed scales limits down while the CPU is saturated, and back
// up when it is not, without flapping.
//
// A [Controller] owns a scale factor in (0, 1] and applies it to its
// targets — anything with SetScaleAt(now, f) error, such as
// *ratelimit.Limiter — whenever it changes. It is driven by readings of
// the CPU signal (utilisation and saturation, as a cpu.Monitor gives
// them): explicitly with [Controller.Observe], or by a goroutine started
// with [Controller.Follow] and stopped with [Controller.Close]. The scale
// is readable with one atomic load ([Controller.Scale]); changes are
// reported to a callback ([WithOnChange]) outside any lock.
//
// Two policies:
//
//   - [Step], the seed's: scale 0.2 while saturated, 1 otherwise. With the
//     monitor's cooldown the limits stay down until the CPU has been
//     calm for it, then jump back to 1.
//   - [AIMD], the recommended one: multiplicative decrease while the CPU
//     is over the threshold, hold during the cooldown, then additive
//     increase tapered by the headroom, between a floor and a ceiling. It
//     settles at the scale the CPU can carry instead of swinging between
//     0.2 and 1.
//
// It follows the CPU signal of package cpu ([cpu.Signal]: a *cpu.Monitor,
// or one of your own) and scales what satisfies the small interface it
// defines, [Target] (*ratelimit.Limiter does).
package loadshed
