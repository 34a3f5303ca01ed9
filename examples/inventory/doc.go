// Package inventory is the CoreCart inventory service: the gRPC service that
// levee's demo protects and its benchmarks load.
//
// The service (proto package corecart.inventory.v1, Go package inventoryv1
// under proto/) allocates stock of a SKU to an order, releases it, and reads
// the stock left. Stock lives in memory. Every Allocate does a fixed amount
// of real CPU work (chained SHA-256, about 5 ms by default, see WithCPUWork)
// so that the server has a CPU-bound capacity to overload.
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
// different request. The service never answers RESOURCE_EXHAUSTED: that code
// is reserved for levee's guards, so a client can tell "out of stock" from
// "server refused the call to protect itself".
//
// The handler does not watch its context: like most real handlers it does
// its work whether or not the caller still waits, which is exactly the waste
// that levee's guards prevent by refusing work up front. The server counts
// that waste (Stats.Late: handlers that finished after the caller's
// deadline).
//
// Register installs the service with the standard health service and server
// reflection on a *grpc.Server. Regenerate the proto's Go code with
// `make proto`.
package inventory
