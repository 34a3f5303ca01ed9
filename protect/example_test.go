package protect_test

import (
	"log"
	"net/netip"

	"google.golang.org/grpc"

	"github.com/levee-go/levee/admission"
	"github.com/levee-go/levee/decide"
	"github.com/levee-go/levee/protect"
)

// A server whose tenants, named by a header, share the capacity max-min
// fairly, and whose calls are shed lowest class first. Callers on the
// internal network may claim a class above a method's default.
func ExampleWithTenants() {
	p, err := protect.New(
		protect.WithTenants(decide.HeaderKey("x-tenant-id"), map[string]float64{"acme": 3}),
		protect.WithCriticality(decide.Criticality{
			Methods: map[string]admission.Criticality{"/shop.Catalog/Reindex": admission.Sheddable},
			Trusted: decide.TrustPeers(netip.MustParsePrefix("10.0.0.0/8")),
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Stop()
	srv := grpc.NewServer(p.ServerOptions()...)
	defer srv.Stop()
	// Register services on srv and serve.
}
