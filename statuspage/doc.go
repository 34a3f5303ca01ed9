// Package statuspage is levee's debug page: what a server's protection
// is doing now and why it refused what it refused, as an http.Handler
// a server mounts (protect.Server.DebugHandler; `levee serve` serves it
// at /debug/levee on its metrics port, and `levee status ADDR` prints
// it). It is text for a person by default and JSON with ?format=json,
// and shows:
//
//   - each run limit (runlimit): its learned limit, and per flow (method)
//     its baseline and current service time, its queue target, and what
//     each lane (tenant and class) has waiting for a turn;
//   - each signal of overload now — the run limit's (cpu, overrun,
//     standing, spike), the memory guard's (memshed), the CPU and memory
//     monitors' — with its value, its threshold, and whether it counts
//     as evidence of overload;
//   - the engine's refusals counted by guard, reason and evidence since
//     it started (decide.Engine.RefusalCounts: levee_refusals_total);
//   - the last refusals (a ring of MaxRefusals, fed by the engine's
//     Observer, sampled: Page.Observer), with their reason, method,
//     class, tenant and evidence figures;
//   - each run limit's last moves (runlimit.Limiter.Moves), each with
//     its cause.
//
// The page reads the engine's rules at each request, so it follows a
// policy file's reloads. Its memory is bounded: the ring, at most
// MaxFlows flows a run limit and MaxLanes lanes a flow, the run limit's
// own ring of moves, and the engine's bounded refusal series. A method
// name or tenant a client sent is shortened to at most MaxNameLen bytes,
// between two characters; the text form quotes them.
//
// It imports nothing of gRPC: any front-end on a decide.Engine has it.
package statuspage
