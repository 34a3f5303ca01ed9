package inventory

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	inventoryv1 "github.com/levee-go/levee/examples/inventory/proto/corecart/inventory/v1"
)

// ServiceName is the full gRPC name of the inventory service.
const ServiceName = "corecart.inventory.v1.InventoryService"

// Register registers srv as the InventoryService of s, together with the
// standard health service (reporting SERVING for the server as a whole, "",
// and for ServiceName) and server reflection, so grpcurl and ghz work without
// proto files. Call it before s.Serve. It returns the health server so the
// caller can report NOT_SERVING during a graceful shutdown (health.Server.Shutdown).
func Register(s *grpc.Server, srv *Server) *health.Server {
	hs := NewHealth()
	RegisterWith(s, srv, hs)
	return hs
}

// NewHealth returns a health server reporting SERVING for the server as a
// whole, "", and for ServiceName.
func NewHealth() *health.Server {
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return hs
}

// RegisterWith is Register with a health server of the caller's (from
// NewHealth): for a service served through several grpc.Servers (package
// goaway's shards), which share one health server so that its Shutdown
// reaches them all.
func RegisterWith(s *grpc.Server, srv *Server, hs *health.Server) {
	inventoryv1.RegisterInventoryServiceServer(s, srv)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
}
