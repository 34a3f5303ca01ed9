package grpcguard_test

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/levee-go/levee/grpcguard"
)

// A handler whose downstream refused it for overload answers "overloaded,
// don't retry"; an application error passes on unchanged.
func ExampleUpstreamOverloaded() {
	ctx := context.Background() // a handler's context in a server
	refused := status.Error(codes.ResourceExhausted, "levee: inventory: rate limit exceeded")
	err := grpcguard.UpstreamOverloaded(ctx, refused)
	fmt.Println(status.Code(err), grpcguard.IsUpstreamOverloaded(err))
	fmt.Println(status.Convert(err).Message())

	notFound := status.Error(codes.NotFound, "no such sku")
	fmt.Println(grpcguard.UpstreamOverloaded(ctx, notFound) == notFound)
	// Output:
	// Unavailable true
	// levee: downstream overloaded: ResourceExhausted: levee: inventory: rate limit exceeded
	// true
}
