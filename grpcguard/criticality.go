package grpcguard

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
)

// WithOutgoingCriticality returns ctx with class as the criticality of the
// calls made with it, overriding the class levee's client interceptor
// would otherwise propagate from the call being served.
func WithOutgoingCriticality(ctx context.Context, class admission.Criticality) context.Context {
	return metadata.AppendToOutgoingContext(ctx, decide.CriticalityHeader, class.String())
}

// propagateCriticality returns ctx with the criticality of the call ctx
// serves, if any, as that of the calls made with it, unless the code set
// one (WithOutgoingCriticality). The class propagated is the one the
// serving rule gave the call (a claim it did not trust is lowered); for a
// call no rule with a Criticality admitted, only a claim at or below
// Critical is passed on, since lowering one's own class is always safe.
// It allocates only when it adds the class.
func propagateCriticality(ctx context.Context) context.Context {
	if v := metadata.ValueFromOutgoingContext(ctx, decide.CriticalityHeader); len(v) > 0 {
		return ctx
	}
	if tc, ok := ctx.Value(stateKey{}).(*tapCtx); ok && tc.classifies {
		return metadata.AppendToOutgoingContext(ctx, decide.CriticalityHeader, tc.class.String())
	}
	v := metadata.ValueFromIncomingContext(ctx, decide.CriticalityHeader)
	if len(v) == 0 {
		return ctx
	}
	if k, ok := admission.ParseCriticality(v[0]); ok && k <= admission.Critical {
		return metadata.AppendToOutgoingContext(ctx, decide.CriticalityHeader, k.String())
	}
	return ctx
}
