// Package inventory is the CoreCart inventory service: the gRPC service that
// levee's demo protects and its benchmarks load.
//
// The service (proto package corecart.inventory.v1, Go package inventoryv1
// under proto/) allocates stock of a SKU to an order, releases it, and reads
// the stock left. Stock lives in memory. Every Allocate does a fixed amount
// of real CPU work (chained SHA-256, about 5 ms by default, see WithCPUWork)
// so that the server has a CPU-bound capacity to overload; GetStock does
// none unless WithStockReadWork gives it a cheap read's worth. With
// WithDatabase, Allocate then also queries a simulated database, holding
// one connection of a small pool for a fixed latency without using the
// CPU: the service is then I/O-bound, like most real gRPC services, and its
// capacity is the pool's (connections / latency calls per second).
//
// Guarantees, under any number of concurrent calls:
//
//   - stock never goes negative; for every SKU,
//     initial == available + allocated + committed (see StockLevel);
//   - an order id is applied at most once: a retried Allocate returns the
//     first answer and changes nothing (within the last WithOrderMemory
//     orders); a Release returns an order's stock once;
//   - a refused call changes nothing.
//
// Status codes: INVALID_ARGUMENT for an empty sku or order_id or a quantity
// <= 0; NOT_FOUND for an unknown sku or order id; FAILED_PRECONDITION when
// the stock is short; ALREADY_EXISTS when an order id is reused for a
// different request; with WithDatabase, DEADLINE_EXCEEDED or CANCELED when
// the call's context ends before its query is done. The service never answers RESOURCE_EXHAUSTED: that code
// is reserved for levee's guards, so a client can tell "out of stock" from
// "server refused the call to protect itself".
//
// The CPU work does not watch the call's context: like most real handlers
// the service does it whether or not the caller still waits, which is
// exactly the waste that levee's guards prevent by refusing work up front.
// The server counts that waste (Stats.Late: handlers that finished after the
// caller's deadline). The simulated database, like a real driver, does watch
// the context: a call whose context ends while it waits for a connection or
// during its query answers DEADLINE_EXCEEDED or CANCELED and changes nothing
// (Stats.DBGaveUp, Stats.DBCutShort).
//
// Options only record values; NewServer checks them all and returns an
// error naming every bad option and value.
//
// Register installs the service with the standard health service and server
// reflection on a *grpc.Server. Regenerate the proto's Go code with
// `make proto`.
package inventory
